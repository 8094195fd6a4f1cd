"""Fault: a 12-layer MLP with sigmoid activations: gradients vanish towards the input."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "layers.0", "kind": "vanishing_gradient"}


class Deep(nn.Module):
    def __init__(self, depth: int = 12):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(depth)])
        self.act = nn.Sigmoid()
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        for layer in self.layers:
            x = self.act(layer(x))
        return self.out(x)


torch.manual_seed(0)
model = Deep()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = regression()
for step in range(100):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
