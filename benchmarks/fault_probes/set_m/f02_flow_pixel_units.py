import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


def make_moons(n, noise=0.06):
    n_outer = n // 2
    n_inner = n - n_outer
    t_outer = torch.rand(n_outer) * math.pi
    t_inner = torch.rand(n_inner) * math.pi
    outer = torch.stack([torch.cos(t_outer), torch.sin(t_outer)], dim=1)
    inner = torch.stack([1.0 - torch.cos(t_inner), 0.5 - torch.sin(t_inner)], dim=1)
    x = torch.cat([outer, inner], dim=0)
    return x + noise * torch.randn(n, 2)


class AffineCoupling(nn.Module):
    def __init__(self, dim, hidden, mask):
        super().__init__()
        self.register_buffer("mask", mask)
        self.scale = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, dim), nn.Tanh(),
        )
        self.shift = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, x):
        x_masked = x * self.mask
        s = self.scale(x_masked) * (1.0 - self.mask)
        t = self.shift(x_masked) * (1.0 - self.mask)
        z = x_masked + (1.0 - self.mask) * (x * torch.exp(s) + t)
        return z, s.sum(dim=1)


class RealNVP(nn.Module):
    def __init__(self, dim=2, hidden=64, n_layers=6):
        super().__init__()
        masks = []
        for i in range(n_layers):
            m = torch.zeros(dim)
            m[i % 2::2] = 1.0
            masks.append(m)
        self.couplings = nn.ModuleList([AffineCoupling(dim, hidden, m) for m in masks])

    def forward(self, x):
        log_det = torch.zeros(x.shape[0])
        for layer in self.couplings:
            x, ld = layer(x)
            log_det = log_det + ld
        return x, log_det

    def log_prob(self, x):
        z, log_det = self(x)
        log_pz = -0.5 * (z ** 2).sum(dim=1) - 0.5 * z.shape[1] * math.log(2 * math.pi)
        return log_pz + log_det


# observed positions, in pixels
data = make_moons(4000) * 150.0 + torch.tensor([420.0, 260.0])
loader = DataLoader(TensorDataset(data), batch_size=100, shuffle=True, drop_last=True)

model = RealNVP(dim=2, hidden=64, n_layers=6)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)

losses = []
for epoch in range(5):
    for (x,) in loader:
        optimizer.zero_grad()
        loss = -model.log_prob(x).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())


def fmt(v):
    m = sum(v) / len(v)
    return f"{m:.4f}" if math.isfinite(m) else "nan"


print(f"initial loss {fmt(losses[:5])} final loss {fmt(losses[-5:])} steps {len(losses)}")
