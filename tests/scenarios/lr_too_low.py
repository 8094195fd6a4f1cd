"""Fault: the learning rate is 1e-8 (a typo for 1e-3): the weights barely move."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "optimizer", "kind": "learning_rate_too_low"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-8)
data = classification()
for step in range(120):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
