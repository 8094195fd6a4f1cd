import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

SIDE = 16
NOISE = 0.3


def make_images(n, gen):
    """Clean 16x16 images: 1-3 soft blobs plus a bar, clipped to [0, 1]."""
    ys, xs = torch.meshgrid(torch.arange(SIDE).float(), torch.arange(SIDE).float(), indexing="ij")
    imgs = torch.zeros(n, SIDE, SIDE)
    for i in range(n):
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            cy, cx = (torch.rand(2, generator=gen) * (SIDE - 4) + 2).tolist()
            r = 1.5 + 2.0 * float(torch.rand(1, generator=gen))
            imgs[i] += 1.4 * torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * r * r))
        if float(torch.rand(1, generator=gen)) < 0.5:
            row = int(torch.randint(0, SIDE, (1,), generator=gen))
            imgs[i, row, :] += 0.8
    return imgs.clamp(0.0, 1.0).reshape(n, SIDE * SIDE)


class DenoisingAE(nn.Module):
    def __init__(self, dim=SIDE * SIDE, hidden=128, latent=24):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 64),
            nn.ReLU(),
            nn.Linear(64, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, 64),
            nn.ReLU(),
            nn.Linear(64, hidden),
            nn.ReLU(),
            nn.Linear(hidden, dim),
            nn.Sigmoid(),
        )

    def forward(self, x):
        with torch.no_grad():
            z = self.encoder(x)
        return self.decoder(z)


def bce(recon, target, eps=1e-6):
    recon = recon.clamp(eps, 1.0 - eps)
    return -(target * torch.log(recon) + (1.0 - target) * torch.log(1.0 - recon)).mean()


def train_one_epoch(model, loader, optimizer, losses):
    model.train()
    for clean, in loader:
        noisy = (clean + NOISE * torch.randn_like(clean)).clamp(0.0, 1.0)
        recon = model(noisy)
        loss = bce(recon, clean)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())


@torch.no_grad()
def evaluate(model, clean):
    model.eval()
    gen = torch.Generator().manual_seed(123)
    noisy = (clean + NOISE * torch.randn(clean.shape, generator=gen)).clamp(0.0, 1.0)
    recon = model(noisy)
    return bce(recon, clean).item(), ((recon - clean) ** 2).mean().item()


def main():
    gen = torch.Generator().manual_seed(0)
    train_x = make_images(2048, gen)
    val_x = make_images(256, gen)
    loader = DataLoader(TensorDataset(train_x), batch_size=64, shuffle=True)

    model = DenoisingAE()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)

    losses = []
    for epoch in range(6):
        train_one_epoch(model, loader, optimizer, losses)
        val_bce, val_mse = evaluate(model, val_x)
        print(f"epoch {epoch} train {sum(losses[-32:]) / 32:.4f} val bce {val_bce:.4f} val mse {val_mse:.4f}")

    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    fmt = lambda v: f"{v:.4f}" if math.isfinite(v) else "nan"
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
