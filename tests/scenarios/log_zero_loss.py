"""Fault: a hand-written cross-entropy takes log(softmax(...)): confident predictions give log(0)."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "loss", "kind": "nan_inf"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
data = classification()
for step in range(150):
    x, y = next(data)
    optimizer.zero_grad()
    probs = torch.softmax(model(x) * 10.0, dim=1)  # a sharpening temperature
    onehot = nn.functional.one_hot(y, 5).float()
    loss = -(onehot * torch.log(probs)).sum(dim=1).mean()
    loss.backward()
    optimizer.step()
