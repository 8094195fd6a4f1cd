"""Heteroscedastic regression: an MLP predicts a mean and a log-variance for tabular data."""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)

N_TRAIN, N_FEAT = 4096, 8
N_SITES = 24
SITE_EFFECT = torch.linspace(-1.0, 1.0, N_SITES)[torch.randperm(N_SITES)]
# raw columns come in very different units (sensor counts, ratios, currency, ...)
SCALES = torch.tensor([1e-3, 0.05, 1.0, 20.0, 500.0, 1e4, 0.2, 3e3])
OFFSETS = torch.tensor([0.01, 0.5, -2.0, 100.0, 2e3, 5e4, 1.0, -1e3])


def make_data(n, g):
    z = torch.randn(n, N_FEAT, generator=g)
    mean = 1.5 * torch.sin(1.5 * z[:, 0]) + z[:, 1] * z[:, 2] + 0.5 * z[:, 3] - 0.8 * z[:, 5]
    std = 0.05 + 0.6 * torch.sigmoid(2.0 * z[:, 6] + z[:, 4])
    site = torch.randint(0, N_SITES, (n,), generator=g)
    mean = mean + SITE_EFFECT[site]
    y = mean + std * torch.randn(n, generator=g)
    x = z * SCALES + OFFSETS
    return x, site, y.unsqueeze(1)


g = torch.Generator().manual_seed(1)
x_train, site_train, y_train = make_data(N_TRAIN, g)

x_mean = x_train.mean(dim=0, keepdim=True)
x_std = x_train.std(dim=0, keepdim=True)
x_train = (x_train - x_mean) / x_std
# one-hot site indicator, appended as is (mostly zeros)
x_train = torch.cat([x_train, nn.functional.one_hot(site_train, N_SITES).float()], dim=1)


class HeteroMLP(nn.Module):
    def __init__(self, d_in, hidden=128):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(d_in, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )
        self.mean_head = nn.Linear(hidden, 1)
        self.logvar_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.mean_head(h), self.logvar_head(h)


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


model = HeteroMLP(N_FEAT + N_SITES)
model.apply(init_weights)
# the variance head gets a smaller step: it reacts strongly to the residuals early on
optimizer = torch.optim.Adam([
    {"params": model.trunk.parameters()},
    {"params": model.mean_head.parameters()},
    {"params": model.logvar_head.parameters(), "lr": 1e-3},
], lr=2e-3)
criterion = nn.GaussianNLLLoss()

losses = []
batch_size = 256
steps = 300
for step in range(steps):
    idx = torch.randint(0, N_TRAIN, (batch_size,), generator=g)
    xb, yb = x_train[idx], y_train[idx]
    mu, logvar = model(xb)
    loss = criterion(mu, yb, logvar.exp())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
