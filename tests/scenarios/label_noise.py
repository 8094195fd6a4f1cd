"""Fault: the labels do not follow from the inputs (a shuffled label file): nothing can be learned."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "input", "kind": "loss_not_decreasing"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = classification(n=256, noise=1.0)
for step in range(150):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
