"""Fault: the optimizer is built from the first two layers only; the output layer is never updated."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "fc3", "kind": "not_updated"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.Adam(list(model.fc1.parameters()) + list(model.fc2.parameters()), lr=1e-3)
data = regression()
for step in range(80):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
