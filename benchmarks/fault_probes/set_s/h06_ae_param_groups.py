"""Convolutional autoencoder; the decoder upsamples with nn.PixelShuffle (sub-pixel conv).
Images in [0, 1], Sigmoid output, L1 reconstruction loss, AdamW with a linear-warmup +
cosine schedule written as a LambdaLR.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

CONFIG = dict(
    seed=0,
    n_images=1024,
    size=32,
    batch_size=32,
    epochs=6,
    lr=3e-3,
    weight_decay=1e-4,
    warmup_steps=20,
    latent_channels=8,
)

torch.manual_seed(CONFIG["seed"])


def make_shapes(n, size, gen):
    """Coloured rectangles and discs on a smooth dark background, values in [0, 1]."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    bg = F.interpolate(torch.rand(n, 3, 4, 4, generator=gen) * 0.3, size=(size, size), mode="bilinear",
                       align_corners=False)
    imgs = bg.clone()
    for i in range(n):
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            colour = torch.rand(3, 1, 1, generator=gen) * 0.7 + 0.3
            cy, cx, r = torch.rand(3, generator=gen).tolist()
            r = 0.1 + 0.2 * r
            if torch.rand(1, generator=gen).item() < 0.5:
                shape = ((yy - cy) ** 2 + (xx - cx) ** 2) <= r ** 2
            else:
                shape = ((yy - cy).abs() <= r) & ((xx - cx).abs() <= 0.7 * r)
            imgs[i] = torch.where(shape, colour.expand(3, size, size), imgs[i])
    return imgs.clamp(0, 1)


class Encoder(nn.Module):
    def __init__(self, latent):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2, padding=1), nn.ReLU(),   # 16x16
            nn.Conv2d(32, 32, 4, stride=2, padding=1), nn.ReLU(),   # 8x8
            nn.Conv2d(32, latent, 1),
        )

    def forward(self, x):
        return self.net(x)


class Upsample(nn.Module):
    """conv to c_out * r^2 channels, then PixelShuffle(r)."""

    def __init__(self, c_in, c_out, r=2):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out * r * r, 3, padding=1)
        self.shuffle = nn.PixelShuffle(r)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.shuffle(self.conv(x)))


class Decoder(nn.Module):
    def __init__(self, latent):
        super().__init__()
        self.inp = nn.Conv2d(latent, 32, 3, padding=1)
        self.up1 = Upsample(32, 32)   # 16x16
        self.up2 = Upsample(32, 8)    # 32x32
        self.out = nn.Conv2d(8, 3, 3, padding=1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, z):
        h = F.relu(self.inp(z))
        h = self.up2(self.up1(h))
        return self.sigmoid(self.out(h))


class AutoEncoder(nn.Module):
    def __init__(self, latent=8):
        super().__init__()
        self.encoder = Encoder(latent)
        self.decoder = Decoder(latent)

    def forward(self, x):
        return self.decoder(self.encoder(x))


def warmup_cosine(warmup, total):
    def fn(step):
        if step < warmup:
            return step / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return fn


def random_flip(x):
    flip = torch.rand(x.shape[0], 1, 1, 1) < 0.5
    return torch.where(flip, x.flip(-1), x)


def main():
    cfg = CONFIG
    gen = torch.Generator().manual_seed(7)
    imgs = make_shapes(cfg["n_images"], cfg["size"], gen)
    loader = DataLoader(TensorDataset(imgs), batch_size=cfg["batch_size"], shuffle=True, drop_last=True)

    model = AutoEncoder(cfg["latent_channels"])
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") else decay).append(p)
    optimizer = torch.optim.AdamW([
        {"params": decay, "weight_decay": cfg["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0, "lr": cfg["lr"] * 0.1},
    ], lr=cfg["lr"])
    total_steps = cfg["epochs"] * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(cfg["warmup_steps"], total_steps))

    losses = []
    for epoch in range(cfg["epochs"]):
        for (x,) in loader:
            x = random_flip(x)
            recon = model(x)
            loss = F.l1_loss(recon, x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        print(f"epoch {epoch} l1 {sum(losses[-len(loader):]) / len(loader):.4f} "
              f"lr {scheduler.get_last_lr()[0]:.2e}")

    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    fmt = lambda v: f"{v:.4f}" if math.isfinite(v) else "nan"
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
