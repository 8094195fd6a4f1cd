"""Learn the dynamics of a damped pendulum with a residual MLP and a multi-step rollout loss.

Trajectories (theta, omega) are simulated with RK4, standardised per feature, and
cut into windows of K+1 states. The model maps a state to the next one
(x + f(x)); it is rolled out autoregressively for K steps from the first state of
each window and the MSE is taken on every step.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_TRAJ = 200
T = 50
DT = 0.1
DAMPING = 0.15
G_OVER_L = 4.0
K = 6
HIDDEN = 128
N_BLOCKS = 2
BATCH_SIZE = 256
LR = 3e-3
EPOCHS = 5

torch.manual_seed(0)


def pendulum_rhs(s):
    theta, omega = s[:, 0], s[:, 1]
    return torch.stack([omega, -G_OVER_L * torch.sin(theta) - DAMPING * omega], dim=1)


def simulate(n, steps, substeps=4):
    s = torch.stack([torch.empty(n).uniform_(-math.pi * 0.8, math.pi * 0.8),
                     torch.empty(n).uniform_(-3.0, 3.0)], dim=1)
    h = DT / substeps
    out = [s]
    for _ in range(steps - 1):
        for _ in range(substeps):
            k1 = pendulum_rhs(s)
            k2 = pendulum_rhs(s + 0.5 * h * k1)
            k3 = pendulum_rhs(s + 0.5 * h * k2)
            k4 = pendulum_rhs(s + h * k3)
            s = s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(s)
    return torch.stack(out, dim=1)                      # (n, steps, 2)


def make_windows(traj, k):
    wins = traj.unfold(1, k + 1, 1)                     # (n, steps-k, 2, k+1)
    return wins.permute(0, 1, 3, 2).reshape(-1, k + 1, 2)


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)
        self.act = nn.SiLU()

    def forward(self, h):
        return h + self.fc2(self.act(self.fc1(h)))


class DynamicsNet(nn.Module):
    def __init__(self, state_dim, hidden, n_blocks):
        super().__init__()
        self.inp = nn.Linear(state_dim, hidden)
        self.blocks = nn.Sequential(*[ResidualBlock(hidden) for _ in range(n_blocks)])
        self.out = nn.Linear(hidden, state_dim)

    def forward(self, x):
        return x + self.out(self.blocks(torch.relu(self.inp(x))))


def rollout_loss(model, window):
    state = window[:, 0]
    loss = 0.0
    for k in range(1, window.size(1)):
        state = model(state)
        loss = loss + F.mse_loss(state, window[:, k])
    return loss / (window.size(1) - 1)


traj = simulate(N_TRAJ, T)
mean, std = traj.reshape(-1, 2).mean(0), traj.reshape(-1, 2).std(0)
traj_n = (traj - mean) / std
windows = make_windows(traj_n, K)
loader = DataLoader(TensorDataset(windows), batch_size=BATCH_SIZE, shuffle=True, drop_last=True)

model = DynamicsNet(2, HIDDEN, N_BLOCKS)
optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

losses = []
for epoch in range(EPOCHS):
    for (w,) in loader:
        loss = rollout_loss(model, w)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.2e} loss {losses[-1]:.5f}")


def fmt(v):
    return f"{v:.4f}" if v == v and abs(v) != float("inf") else "nan"


first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
