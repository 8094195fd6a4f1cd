"""Fault: per-batch standardisation divides by the std of a feature that gets stuck (std 0) from step 40."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "input", "kind": "nan_inf"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = regression()
for step in range(80):
    x, y = next(data)
    if step >= 40:
        x[:, 3] = 0.5  # a sensor stuck at one value
    x = (x - x.mean(dim=0)) / x.std(dim=0)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
