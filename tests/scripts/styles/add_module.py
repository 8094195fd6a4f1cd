"""A model grown with add_module on a variable, and a child built first and added later."""

from collections import OrderedDict

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential()
model.add_module("hidden", nn.Linear(16, 64))
model.add_module("act", nn.ReLU())
out = nn.Linear(64, 1)
model.add_module("out", out)

head = nn.Sequential(OrderedDict([
    ("fc", nn.Linear(1, 8)),
    ("act", nn.Tanh()),
    ("proj", nn.Linear(8, 1)),
]))
net = nn.Sequential(model, head)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-2)

for step in range(40):
    x = torch.randn(32, 16)
    y = x.sum(dim=1, keepdim=True)
    if step == 20:
        x = x * 1e3
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(net(x), y)
    loss.backward()
    optimizer.step()
