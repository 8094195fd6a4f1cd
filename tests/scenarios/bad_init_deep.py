"""Fault: a deep ReLU MLP initialised with unit-variance weights (no fan-in scaling): activations explode."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "blocks.0", "kind": "poor_initialization"}


class Deep(nn.Module):
    def __init__(self, depth: int = 8, width: int = 64):
        super().__init__()
        self.inp = nn.Linear(16, width)
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])
        self.out = nn.Linear(width, 1)
        for block in self.blocks:
            nn.init.normal_(block.weight, std=1.0)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.out(x)


torch.manual_seed(0)
model = Deep()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = regression()
for step in range(60):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
