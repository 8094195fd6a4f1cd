"""A class model under torch.compile (the eager backend: no C++ compiler needed)."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


torch.manual_seed(0)
model = torch.compile(Net(), backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)

for step in range(40):
    x = torch.randn(32, 16)
    y = x.sum(dim=1, keepdim=True)
    if step == 20:
        x = x * 1e3
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
