"""Fault: a custom normalisation layer divides by the vector norm without an epsilon; a ReLU can make it zero."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "norm", "kind": "nan_inf"}


class L2Normalize(nn.Module):
    def forward(self, x):
        return x / x.norm(dim=1, keepdim=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 4)
        self.norm = L2Normalize()
        self.fc2 = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc2(self.norm(torch.relu(self.fc1(x))))


torch.manual_seed(3)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = regression()
for step in range(120):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
