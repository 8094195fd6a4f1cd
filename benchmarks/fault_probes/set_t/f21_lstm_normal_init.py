"""LSTM encoder-decoder load forecaster on a synthetic multivariate series."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
T_TOTAL = 3000
IN_LEN = 32
HORIZON = 8
BATCH = 64
EPOCHS = 6
LR = 3e-3
HIDDEN = 64
TRAIN_FRAC = 0.8


def make_series(n, rng):
    """Columns: load [kW], temperature [C], hour sin, hour cos."""
    t = np.arange(n)
    hour = t % 24
    temp = 15 + 8 * np.sin(2 * np.pi * t / (24 * 7)) + 3 * np.sin(2 * np.pi * hour / 24) \
        + rng.normal(0, 0.8, n)
    load = 900 + 250 * np.sin(2 * np.pi * (hour - 6) / 24) + 12 * (temp - 15) \
        + 80 * np.sin(2 * np.pi * t / (24 * 7)) + rng.normal(0, 20, n)
    return np.stack([load, temp, np.sin(2 * np.pi * hour / 24),
                     np.cos(2 * np.pi * hour / 24)], axis=1).astype(np.float32)


def make_windows(series, in_len, horizon, target_col=0):
    xs, ys = [], []
    for s in range(len(series) - in_len - horizon + 1):
        xs.append(series[s:s + in_len])
        ys.append(series[s + in_len:s + in_len + horizon, target_col])
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


class Seq2Seq(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.encoder = nn.LSTM(n_features, hidden, batch_first=True)
        self.decoder = nn.LSTMCell(1, hidden)
        self.out = nn.Linear(hidden, 1)
        for name, p in self.named_parameters():
            if "weight" in name:
                nn.init.normal_(p, 0.0, 1.0)

    def encode(self, x):
        _, (h, c) = self.encoder(x)
        return h[-1], c[-1]

    def step(self, inp, state):
        h, c = self.decoder(inp, state)
        return self.out(h), (h, c)


def horizon_loss(model, x, y, teacher_forcing=True):
    state = model.encode(x)
    inp = x[:, -1, :1]                     # last observed load, (B, 1)
    loss = 0.0
    for t in range(y.size(1)):
        pred, state = model.step(inp, state)
        loss = loss + F.mse_loss(pred.squeeze(1), y[:, t])
        inp = y[:, t:t + 1] if teacher_forcing else pred
    return loss / y.size(1)


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    raw = make_series(T_TOTAL, rng)
    split = int(TRAIN_FRAC * T_TOTAL)
    mean, std = raw[:split].mean(0), raw[:split].std(0)
    series = (raw - mean) / std

    x_tr, y_tr = make_windows(series[:split], IN_LEN, HORIZON)
    x_va, y_va = make_windows(series[split:], IN_LEN, HORIZON)
    loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=BATCH, shuffle=True,
                        drop_last=True)

    model = Seq2Seq(raw.shape[1], HIDDEN)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min",
                                                           factor=0.5, patience=1)
    losses = []
    for epoch in range(EPOCHS):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = horizon_loss(model, xb, yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val = horizon_loss(model, x_va, y_va, teacher_forcing=False).item()
        scheduler.step(val)
        print(f"epoch {epoch} train {np.mean(losses[-len(loader):]):.4f} val {val:.4f} "
              f"lr {optimizer.param_groups[0]['lr']:.1e}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
