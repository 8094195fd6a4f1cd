"""Fault: the hidden layer's bias is initialised far negative, so its ReLU units never fire."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "hidden", "kind": "dead_units"}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 64)
        self.hidden = nn.Linear(64, 64)
        self.out = nn.Linear(64, 1)
        nn.init.constant_(self.hidden.bias, -4.0)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        x = torch.relu(self.hidden(x))
        return self.out(x)


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = regression()
for step in range(100):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
