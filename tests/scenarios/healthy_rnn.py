"""Healthy: a GRU regressing the running mean of a sequence."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import sequences  # noqa: E402

EXPECTED = None


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(8, 32, batch_first=True)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h)


torch.manual_seed(0)
model = Seq()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
data = sequences()
for step in range(120):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
