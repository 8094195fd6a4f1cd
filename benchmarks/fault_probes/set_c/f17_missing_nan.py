import math
from dataclasses import dataclass

import torch
import torch.nn as nn

torch.manual_seed(0)


@dataclass
class Config:
    seq_len: int = 24
    n_inputs: int = 4
    hidden: int = 32
    batch_size: int = 32
    steps: int = 150
    lr: float = 3e-3
    val_every: int = 10
    plateau_patience: int = 2
    plateau_factor: float = 0.5
    max_grad_norm: float = 1.0


def make_series(n, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(cfg.seq_len + 1, dtype=torch.float32)
    freq = 0.2 + 0.6 * torch.rand(n, 1, generator=g)
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    amp = 0.5 + torch.rand(n, 1, generator=g)
    clean = amp * torch.sin(freq * t + phase)
    signal = clean[:, :-1] + 0.1 * torch.randn(n, cfg.seq_len, generator=g)
    trend = torch.cumsum(0.05 * torch.randn(n, cfg.seq_len, generator=g), dim=1)
    step_idx = (t[:-1] / cfg.seq_len).expand(n, -1)
    gain = amp.expand(n, cfg.seq_len)
    dropped = torch.rand(n, cfg.seq_len, generator=g) < 0.03
    signal = signal.masked_fill(dropped, float("nan"))
    x = torch.stack([signal, trend, step_idx, gain], dim=-1)
    y = clean[:, -1] + 0.5 * trend[:, -1]
    return x, y


def fill_missing(x):
    return torch.nan_to_num(x, nan=0.0)


def standardize(x_tr, x_val):
    mean = x_tr.mean(dim=(0, 1))
    std = x_tr.std(dim=(0, 1)).clamp_min(1e-6)
    return (x_tr - mean) / std, (x_val - mean) / std


class GRURegressor(nn.Module):
    def __init__(self, n_inputs, hidden):
        super().__init__()
        self.gru = nn.GRU(n_inputs, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1]).squeeze(-1)


def build_model(cfg):
    return GRURegressor(cfg.n_inputs, cfg.hidden)


def train(model, cfg, train_data, val_data):
    x_tr, y_tr = train_data
    x_val, y_val = val_data
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=cfg.plateau_factor,
                                                           patience=cfg.plateau_patience)
    criterion = nn.MSELoss()
    g = torch.Generator().manual_seed(5)
    losses = []
    for step in range(cfg.steps):
        model.train()
        idx = torch.randint(0, x_tr.shape[0], (cfg.batch_size,), generator=g)
        xb, yb = x_tr[idx], y_tr[idx]
        optimizer.zero_grad()
        pred = model(xb)
        loss = criterion(pred, yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % cfg.val_every == 0:
            model.eval()
            with torch.no_grad():
                val_loss = criterion(model(x_val), y_val).item()
            scheduler.step(val_loss)
    return losses


def main():
    cfg = Config()
    x_tr, y_tr = make_series(2048, cfg, seed=11)
    x_val, y_val = make_series(256, cfg, seed=12)
    x_tr, x_val = standardize(x_tr, x_val)
    train_data, val_data = (x_tr, y_tr), (x_val, y_val)
    model = build_model(cfg)
    losses = train(model, cfg, train_data, val_data)

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"

    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
