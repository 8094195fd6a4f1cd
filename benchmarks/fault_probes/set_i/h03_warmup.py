import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

T = 1000
STEPS = 300
BATCH = 512


def make_dataset(n=20000):
    # mixture of 8 Gaussians on a ring, in raw (pixel-like) coordinates
    k = torch.randint(0, 8, (n,))
    ang = k.float() * (2 * math.pi / 8)
    centers = torch.stack([320 + 120 * torch.cos(ang), 240 + 120 * torch.sin(ang)], dim=1)
    return centers + 6.0 * torch.randn(n, 2)


raw = make_dataset()
data_mean, data_std = raw.mean(0), raw.std(0)
data = (raw - data_mean) / data_std


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None, :]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class Denoiser(nn.Module):
    def __init__(self, hidden=128, temb_dim=32):
        super().__init__()
        self.temb_dim = temb_dim
        self.time_mlp = nn.Sequential(
            nn.Linear(temb_dim, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
        )
        self.inp = nn.Linear(2, hidden)
        self.blocks = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(3)])
        self.act = nn.SiLU()
        self.out = nn.Linear(hidden, 2)

    def forward(self, x, t):
        temb = self.time_mlp(timestep_embedding(t, self.temb_dim))
        h = self.inp(x) + temb
        for blk in self.blocks:
            h = h + blk(self.act(h))
        return self.out(self.act(h))


betas = torch.linspace(1e-4, 0.02, T)
alphas = 1.0 - betas
alphas_bar = torch.cumprod(alphas, dim=0)
sqrt_ab = alphas_bar.sqrt()
sqrt_1mab = (1.0 - alphas_bar).sqrt()


def q_sample(x0, t, noise):
    return sqrt_ab[t][:, None] * x0 + sqrt_1mab[t][:, None] * noise


model = Denoiser()
ema = copy.deepcopy(model)
for p in ema.parameters():
    p.requires_grad_(False)
EMA_DECAY = 0.995

optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=40)

losses = []
for step in range(STEPS):
    x0 = data[torch.randint(0, len(data), (BATCH,))]
    t = torch.randint(0, T, (BATCH,))
    noise = torch.randn_like(x0)
    x_t = q_sample(x0, t, noise)
    pred = model(x_t, t)
    loss = F.mse_loss(pred, noise)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    with torch.no_grad():
        for p_ema, p in zip(ema.parameters(), model.parameters()):
            p_ema.lerp_(p, 1.0 - EMA_DECAY)
    losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
