"""Mixture density network for a 1-D multimodal regression (the inverted sine problem).

y -> x = y + 0.3 sin(2 pi y) + noise; we learn p(y | x), which has up to three modes.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_POINTS = 4000
N_COMPONENTS = 20
HIDDEN = 64
BATCH_SIZE = 128
LR = 3e-3
EPOCHS = 8
SEED = 0


def make_data(n, rng):
    y = rng.uniform(0.0, 1.0, size=n)
    x = y + 0.3 * np.sin(2 * np.pi * y) + rng.normal(0.0, 0.03, size=n)
    x = 500.0 + 100.0 * x          # sensor reading in raw units
    return x.astype(np.float32), y.astype(np.float32)


class MDN(nn.Module):
    def __init__(self, n_components=N_COMPONENTS, hidden=HIDDEN):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(1, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
        )
        self.logit_head = nn.Linear(hidden, n_components)
        self.mean_head = nn.Linear(hidden, n_components)
        self.log_scale_head = nn.Linear(hidden, n_components)

    def forward(self, x):
        h = self.trunk(x)
        return self.logit_head(h), self.mean_head(h), self.log_scale_head(h)


def mdn_nll(logits, means, log_scales, y):
    """Negative log-likelihood of y (B,) under the Gaussian mixture (B, K)."""
    log_pi = F.log_softmax(logits, dim=-1)
    y = y.unsqueeze(-1)
    z = (y - means) * torch.exp(-log_scales)
    log_prob = -0.5 * z ** 2 - log_scales - 0.5 * math.log(2 * math.pi)
    return -torch.logsumexp(log_pi + log_prob, dim=-1).mean()


def fmt(xs):
    v = sum(xs) / len(xs)
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x, y = make_data(N_POINTS, rng)
    x = (x - x.mean()) / x.std()
    y = (y - y.mean()) / y.std()
    dataset = TensorDataset(torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y))
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True)

    model = MDN()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)

    losses = []
    for epoch in range(EPOCHS):
        for xb, yb in loader:
            logits, means, log_scales = model(xb)
            loss = mdn_nll(logits, means, log_scales, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        print(f"epoch {epoch} nll {sum(losses[-len(loader):]) / len(loader):.4f}")

    print(f"initial loss {fmt(losses[:5])} final loss {fmt(losses[-5:])} steps {len(losses)}")


if __name__ == "__main__":
    main()
