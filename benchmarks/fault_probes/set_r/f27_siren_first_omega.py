"""SIREN coordinate MLP fitting a synthetic 2-D image.

(x, y) in [-1, 1]^2 -> grey value. Sine activations, omega_0 = 30 in the first
layer, the SIREN uniform initialisation written by hand, MSE on pixel values,
Adam with a small learning rate, large random batches of pixel coordinates.
"""
import math

import numpy as np
import torch
import torch.nn as nn

SEED = 0
RES = 64
HIDDEN = 96
N_HIDDEN_LAYERS = 2
FIRST_OMEGA = 3.0
HIDDEN_OMEGA = 30.0
LR = 1e-4
STEPS = 200
BATCH = 2048
LR_GAMMA = 0.995

torch.manual_seed(SEED)
rng = np.random.default_rng(SEED)


def make_image(res):
    """Synthetic grey image in [0, 1]: rings, a square, blobs and some stripes."""
    t = np.linspace(-1, 1, res)
    yy, xx = np.meshgrid(t, t, indexing="ij")
    r = np.sqrt(xx ** 2 + yy ** 2)
    img = 0.5 + 0.25 * np.cos(12 * r)
    img += 0.3 * ((np.abs(xx - 0.4) < 0.25) & (np.abs(yy + 0.35) < 0.2))
    for _ in range(5):
        cx, cy = rng.uniform(-0.8, 0.8, 2)
        s = rng.uniform(0.08, 0.2)
        img -= 0.3 * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * s ** 2))
    img += 0.1 * np.sin(20 * xx + 5 * yy)
    img = (img - img.min()) / (img.max() - img.min())
    return img.astype(np.float32)


def get_mgrid(res):
    t = torch.linspace(-1, 1, res)
    grid = torch.stack(torch.meshgrid(t, t, indexing="ij"), dim=-1)
    return grid.reshape(-1, 2)


class SineLayer(nn.Module):
    def __init__(self, in_features, out_features, is_first=False, omega_0=30.0):
        super().__init__()
        self.omega_0 = omega_0
        self.is_first = is_first
        self.in_features = in_features
        self.linear = nn.Linear(in_features, out_features)
        self.init_weights()

    def init_weights(self):
        with torch.no_grad():
            if self.is_first:
                bound = 1.0 / self.in_features
            else:
                bound = math.sqrt(6.0 / self.in_features) / self.omega_0
            self.linear.weight.uniform_(-bound, bound)

    def forward(self, x):
        return torch.sin(self.omega_0 * self.linear(x))


class Siren(nn.Module):
    def __init__(self, in_features=2, hidden=96, n_hidden_layers=2, out_features=1,
                 first_omega_0=30.0, hidden_omega_0=30.0):
        super().__init__()
        layers = [SineLayer(in_features, hidden, is_first=True, omega_0=first_omega_0)]
        for _ in range(n_hidden_layers):
            layers.append(SineLayer(hidden, hidden, omega_0=hidden_omega_0))
        self.net = nn.Sequential(*layers)
        self.out = nn.Linear(hidden, out_features)
        with torch.no_grad():
            bound = math.sqrt(6.0 / hidden) / hidden_omega_0
            self.out.weight.uniform_(-bound, bound)

    def forward(self, coords):
        return self.out(self.net(coords))


image = make_image(RES)
coords = get_mgrid(RES)                                   # (RES*RES, 2)
pixels = torch.from_numpy(image).reshape(-1, 1)          # (RES*RES, 1)

model = Siren(2, HIDDEN, N_HIDDEN_LAYERS, 1, FIRST_OMEGA, HIDDEN_OMEGA)
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=LR_GAMMA)
loss_fn = nn.MSELoss()

losses = []
for step in range(STEPS):
    idx = torch.randperm(coords.shape[0])[:BATCH]
    pred = model(coords[idx])
    loss = loss_fn(pred, pixels[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
    if step % 50 == 0 or step == STEPS - 1:
        psnr = 10 * math.log10(1.0 / max(loss.item(), 1e-12))
        print(f"step {step:3d} loss {loss.item():.5f} psnr {psnr:.1f} dB")


def fmt(v):
    return f"{v:.5f}" if math.isfinite(v) else "nan"


init, final = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {len(losses)}")
