"""Fault: a step schedule with gamma=30 instead of 1/30 multiplies the learning rate at step 50."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "optimizer", "kind": "learning_rate_too_high"}

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=30.0)
data = regression()
for step in range(90):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    schedule.step()
