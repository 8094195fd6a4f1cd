"""A torch.compile'd MLP; prints Dynamo's graph-break and graph counts."""
import torch
from torch import nn
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
compiled = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(30):
    x = torch.randn(16, 8)
    loss = nn.functional.mse_loss(compiled(x), x.sum(1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("graph_breaks", sum(counters["graph_break"].values()), "graphs", counters["stats"]["unique_graphs"])
