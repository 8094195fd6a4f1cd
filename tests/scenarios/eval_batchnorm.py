"""Fault: model.eval() is called before training, so BatchNorm never uses batch statistics."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "bn1", "kind": "frozen"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.bn1 = nn.BatchNorm1d(64)
        self.fc2 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn1(self.fc1(x))))


torch.manual_seed(0)
model = Net()
model.eval()  # meant for the validation loop, left on
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = regression(scale=5.0)
for step in range(80):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x + 4.0), y)
    loss.backward()
    optimizer.step()
