"""Conv1d surrogate for 1-D heat conduction: predicts the temperature increment over one
coarse time step from the current field and the conductivity profile."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
NX = 64
N_TRAJ = 60
N_FRAMES = 20
SUBSTEPS = 10
BATCH = 32
EPOCHS = 8
LR = 2e-3
CLIP = 1.0
WIDTH = 32
TRAIN_TRAJ = 48


def simulate(n_traj, rng):
    """Explicit finite-volume solver of u_t = (k(x) u_x)_x on a periodic rod, in kelvin.

    Returns fields (n_traj, N_FRAMES, NX) and conductivity profiles (n_traj, NX).
    """
    x = np.linspace(0, 1, NX, endpoint=False)
    dx = 1.0 / NX
    fields, conds = [], []
    for _ in range(n_traj):
        log_k = sum(rng.normal(0, 0.35) * np.sin(2 * np.pi * m * x + rng.uniform(0, 2 * np.pi))
                    for m in range(1, 4))
        k = np.exp(log_k)
        dt = 0.4 * dx ** 2 / k.max()
        u = 300 + sum(rng.normal(0, 12 / m) * np.sin(2 * np.pi * m * x + rng.uniform(0, 2 * np.pi))
                      for m in range(1, 7))
        for _ in range(rng.integers(1, 4)):          # a few hot spots
            u = u + rng.uniform(10, 30) * np.exp(-((x - rng.uniform()) / 0.03) ** 2)
        k_face = 0.5 * (k + np.roll(k, -1))
        frames = [u.copy()]
        for _ in range(N_FRAMES - 1):
            for _ in range(SUBSTEPS):
                flux = k_face * (np.roll(u, -1) - u) / dx
                u = u + dt / dx * (flux - np.roll(flux, 1))
            frames.append(u.copy())
        fields.append(np.stack(frames))
        conds.append(k)
    return np.stack(fields).astype(np.float32), np.stack(conds).astype(np.float32)


def make_pairs(fields, conds):
    """(u_t, k) -> u_{t+1} for every consecutive pair of frames."""
    u_now = fields[:, :-1].reshape(-1, NX)
    u_next = fields[:, 1:].reshape(-1, NX)
    k = np.repeat(conds, N_FRAMES - 1, axis=0)
    return u_now, k, u_next


class HeatSurrogate(nn.Module):
    def __init__(self, width):
        super().__init__()
        conv = lambda c_in, c_out: nn.Conv1d(c_in, c_out, 5, padding=2, padding_mode="circular")
        self.lift_u = conv(1, width)
        self.lift_k = conv(1, width)
        self.body = nn.Sequential(
            nn.GELU(), nn.Dropout1d(0.5),
            conv(width, width), nn.GELU(), nn.Dropout1d(0.5),
            conv(width, width), nn.GELU(), nn.Dropout1d(0.5),
            conv(width, 1),
        )

    def forward(self, x):
        """x (B, 2, NX): normalised temperature and conductivity -> normalised increment."""
        u, k = x[:, :1], x[:, 1:]
        return self.body(self.lift_u(u) + self.lift_k(k))


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    fields, conds = simulate(N_TRAJ, rng)
    u_now, k, u_next = make_pairs(fields[:TRAIN_TRAJ], conds[:TRAIN_TRAJ])
    u_now_va, k_va, u_next_va = make_pairs(fields[TRAIN_TRAJ:], conds[TRAIN_TRAJ:])

    stats = {"u_mean": u_now.mean(), "u_std": u_now.std(), "k_mean": k.mean(),
             "k_std": k.std(), "d_mean": (u_next - u_now).mean(), "d_std": (u_next - u_now).std()}

    def normalise(u0, kk, u1):
        x = np.stack([(u0 - stats["u_mean"]) / stats["u_std"],
                      (kk - stats["k_mean"]) / stats["k_std"]], axis=1)
        y = ((u1 - u0) - stats["d_mean"]) / stats["d_std"]
        return torch.from_numpy(x), torch.from_numpy(y[:, None, :])

    x_tr, y_tr = normalise(u_now, k, u_next)
    x_va, y_va = normalise(u_now_va, k_va, u_next_va)
    loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=BATCH, shuffle=True,
                        drop_last=True)

    model = HeatSurrogate(WIDTH)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min",
                                                           factor=0.5, patience=1)
    losses = []
    for epoch in range(EPOCHS):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(xb), yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            pred = model(x_va)
            val = F.mse_loss(pred, y_va).item()
            # one-step error in kelvin after undoing the normalisation
            err_k = ((pred - y_va) * stats["d_std"]).pow(2).mean().sqrt().item()
        scheduler.step(val)
        print(f"epoch {epoch} train {np.mean(losses[-len(loader):]):.4f} val {val:.4f} "
              f"rmse {err_k:.3f} K lr {optimizer.param_groups[0]['lr']:.1e}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
