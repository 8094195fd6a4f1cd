"""A class model wrapped in DistributedDataParallel (one process, gloo), as torchrun scripts do."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
dist.init_process_group("gloo", rank=0, world_size=1)
torch.manual_seed(0)
model = DistributedDataParallel(Net())
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
dist.destroy_process_group()
