"""Poisson regression network for count data.

Synthetic "claims per policy" data: counts drawn from a Poisson distribution whose
log-rate is a known nonlinear function of 6 features. The network predicts the
log-rate; PoissonNLLLoss(log_input=True). RMSprop, mini-batches by index slicing.
"""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=8000)
p.add_argument("--batch-size", type=int, default=256)
p.add_argument("--epochs", type=int, default=8)
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--hidden", type=int, default=64)
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()

torch.manual_seed(args.seed)
rng = np.random.default_rng(args.seed)


def true_log_rate(x):
    """x: standardised features. Known generating log-rate."""
    return (0.5 + 1.0 * np.sin(1.5 * x[:, 0]) + 0.8 * np.tanh(x[:, 1] * x[:, 2])
            - 0.6 * x[:, 3] + 0.5 * np.tanh(x[:, 4]) - 0.3 * x[:, 5] ** 2)


def make_data(n):
    # raw features on their natural scales
    driver_age = rng.normal(45, 14, n)
    car_value = rng.lognormal(9.8, 0.6, n)
    km_per_year = rng.gamma(4.0, 3500.0, n)
    bonus_malus = rng.normal(100, 25, n)
    density = rng.lognormal(6.0, 1.0, n)
    power_kw = rng.normal(90, 30, n)
    raw = np.stack([driver_age, car_value, km_per_year, bonus_malus, density, power_kw], axis=1)
    z = (raw - raw.mean(0)) / raw.std(0)
    counts = rng.poisson(np.exp(true_log_rate(z)))
    return raw, counts


def standardise(x, mean, std):
    return (x - mean) / std


class RateNet(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
        )
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        return self.head(h).squeeze(-1)   # log-rate


raw, counts = make_data(args.n)
rng.shuffle(raw)   # rows come sorted by policy id
mean, std = raw.mean(0), raw.std(0)
X = torch.tensor(standardise(raw, mean, std), dtype=torch.float32)
Y = torch.tensor(counts, dtype=torch.float32)
print(f"counts: mean {counts.mean():.2f}, max {counts.max()}, zeros {np.mean(counts == 0):.2%}")

model = RateNet(X.shape[1], args.hidden)
with torch.no_grad():
    model.head.bias.fill_(math.log(counts.mean()))

criterion = nn.PoissonNLLLoss(log_input=True, full=True)
optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr, alpha=0.99)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)

losses = []
n = X.shape[0]
for epoch in range(args.epochs):
    perm = torch.randperm(n)
    for start in range(0, n - args.batch_size + 1, args.batch_size):
        idx = perm[start:start + args.batch_size]
        xb, yb = X[idx], Y[idx]
        log_rate = model(xb)
        loss = criterion(log_rate, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.2e} loss {np.mean(losses[-10:]):.4f}")

with torch.no_grad():
    oracle = criterion(torch.tensor(true_log_rate(standardise(raw, mean, std)), dtype=torch.float32), Y)
    pred = torch.cat([model(X[i:i + 1024]) for i in range(0, n, 1024)]).reshape(-1)
    true = torch.tensor(true_log_rate(standardise(raw, mean, std)), dtype=torch.float32)
    rmse = (pred - true).pow(2).mean().sqrt()
print(f"oracle loss (true rate) {oracle.item():.4f}, log-rate rmse vs truth {rmse.item():.3f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


init, final = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {len(losses)}")
