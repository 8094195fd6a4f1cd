"""A model returned by a factory function, layers built in a loop; a ModuleList built by a comprehension."""

import torch
from torch import nn


def build_mlp(width: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(16, width)]
    for _ in range(depth):
        layers.append(nn.ReLU())
        layers.append(nn.Linear(width, width))
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


class Residual(nn.Module):
    def __init__(self, width: int, n: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(n)])
        self.gates = nn.ModuleDict({name: nn.Sigmoid() for name in ("a", "b")})
        self.proj = nn.Sequential(nn.Linear(width, 4), nn.Tanh(), nn.Linear(4, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + self.gates["a"](block(x))
        return x + self.proj(x)


def make_model() -> nn.Module:
    return nn.Sequential(build_mlp(32, 2), Residual(1, 2))


torch.manual_seed(0)
model = make_model()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for step in range(40):
    x = torch.randn(32, 16)
    y = x.mean(dim=1, keepdim=True)
    if step == 20:
        x = x * 1e3
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
