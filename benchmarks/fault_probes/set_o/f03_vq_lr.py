import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

# synthetic 16x16 images: a few soft blobs and bars on a dark background
N_IMG = 2048


def make_images(n):
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    imgs = torch.zeros(n, 16, 16)
    for k in range(2):
        cx = torch.randint(2, 14, (n, 1, 1)).float()
        cy = torch.randint(2, 14, (n, 1, 1)).float()
        r = 1.0 + 2.0 * torch.rand(n, 1, 1)
        imgs += torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r ** 2))
    bar = torch.randint(0, 16, (n,))
    horiz = torch.rand(n) < 0.5
    for i in range(n):
        if horiz[i]:
            imgs[i, bar[i], :] += 0.6
        else:
            imgs[i, :, bar[i]] += 0.6
    return imgs.clamp(0, 1).unsqueeze(1)


images = make_images(N_IMG)
loader = DataLoader(TensorDataset(images), batch_size=64, shuffle=True, drop_last=True)


class VectorQuantizer(nn.Module):
    def __init__(self, num_codes, dim):
        super().__init__()
        self.codebook = nn.Embedding(num_codes, dim)
        self.codebook.weight.data.uniform_(-1.0 / num_codes, 1.0 / num_codes)

    def forward(self, z):
        # z: (B, D, H, W) -> nearest code per position
        b, d, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, d)
        dist = (flat.pow(2).sum(1, keepdim=True)
                - 2 * flat @ self.codebook.weight.t()
                + self.codebook.weight.pow(2).sum(1)[None, :])
        idx = dist.argmin(1)
        z_q = self.codebook(idx).view(b, h, w, d).permute(0, 3, 1, 2)
        return z_q, idx


class VQVAE(nn.Module):
    def __init__(self, num_codes=64, dim=16):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, dim, 1),
        )
        self.vq = VectorQuantizer(num_codes, dim)
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(dim, 64, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 1, 3, padding=1), nn.Sigmoid(),
        )

    def forward(self, x):
        z_e = self.encoder(x)
        z_q, idx = self.vq(z_e)
        z_st = z_e + (z_q - z_e).detach()   # straight-through estimator
        x_hat = self.decoder(z_st)
        return x_hat, z_e, z_q, idx


model = VQVAE()
opt = torch.optim.Adam(model.parameters(), lr=0.2)
beta = 0.25

losses = []
step = 0
STEPS = 200
while step < STEPS:
    for (x,) in loader:
        x_hat, z_e, z_q, idx = model(x)
        recon = F.mse_loss(x_hat, x)
        codebook_loss = F.mse_loss(z_q, z_e.detach())
        commit_loss = F.mse_loss(z_e, z_q.detach())
        loss = recon + codebook_loss + beta * commit_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        step += 1
        if step >= STEPS:
            break


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


print(f"codes used in last batch: {idx.unique().numel()}")
print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
