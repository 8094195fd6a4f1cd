"""Fault: the loop never calls zero_grad(): gradients accumulate over every step."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "optimizer", "kind": "grads_not_zeroed"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
data = regression()
for step in range(80):
    x, y = next(data)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
