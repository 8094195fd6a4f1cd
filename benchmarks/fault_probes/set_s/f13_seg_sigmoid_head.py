"""Binary segmentation of blobs with a small FCN (encoder-decoder, skip connections,
ConvTranspose2d upsampling, BatchNorm). Loss = BCEWithLogits + soft Dice. Adam.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
N_IMAGES = 768
IMG = 32
BATCH = 32
EPOCHS = 8
LR = 5e-3
DICE_WEIGHT = 1.0

torch.manual_seed(SEED)


def make_blobs(n, size, gen):
    """Images with 1-3 elliptical blobs on a textured background; mask = union of blobs."""
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    imgs = torch.zeros(n, 1, size, size)
    masks = torch.zeros(n, 1, size, size)
    for i in range(n):
        k = int(torch.randint(1, 4, (1,), generator=gen))
        for _ in range(k):
            cy, cx = (torch.rand(2, generator=gen) * (size - 8) + 4).tolist()
            ry, rx = (torch.rand(2, generator=gen) * 5 + 2.5).tolist()
            inside = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
            masks[i, 0][inside] = 1.0
        brightness = 0.5 + 0.5 * torch.rand(1, generator=gen).item()
        imgs[i, 0] = masks[i, 0] * brightness
    # low-frequency background clutter + pixel noise
    clutter = F.interpolate(torch.rand(n, 1, 6, 6, generator=gen), size=(size, size), mode="bilinear",
                            align_corners=False)
    imgs = imgs + 0.5 * clutter + 0.25 * torch.randn(n, 1, size, size, generator=gen)
    imgs = (imgs - imgs.mean()) / imgs.std()
    return imgs, masks


def conv_block(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class FCN(nn.Module):
    def __init__(self, c_in=1, base=8):
        super().__init__()
        self.enc1 = conv_block(c_in, base)            # 32x32
        self.enc2 = conv_block(base, base * 2)        # 16x16
        self.bottleneck = conv_block(base * 2, base * 4)  # 8x8
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(base * 4, base * 2, 2, stride=2)
        self.dec2 = conv_block(base * 4, base * 2)
        self.up1 = nn.ConvTranspose2d(base * 2, base, 2, stride=2)
        self.dec1 = conv_block(base * 2, base)
        self.head = nn.Sequential(nn.Conv2d(base, 1, 1), nn.Sigmoid())

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        b = self.bottleneck(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


def soft_dice_loss(logits, target, eps=1.0):
    probs = torch.sigmoid(logits)
    dims = (1, 2, 3)
    inter = (probs * target).sum(dims)
    denom = probs.sum(dims) + target.sum(dims)
    dice = (2 * inter + eps) / (denom + eps)
    return 1 - dice.mean()


def random_flip(x, m):
    """flip image and mask together, left-right, for a random half of the batch"""
    flip = torch.rand(x.shape[0], 1, 1, 1) < 0.5
    x = torch.where(flip, x.flip(-1), x)
    m = torch.where(flip, m.flip(-1), m)
    return x, m


def main():
    gen = torch.Generator().manual_seed(42)
    imgs, masks = make_blobs(N_IMAGES, IMG, gen)
    loader = DataLoader(TensorDataset(imgs, masks), batch_size=BATCH, shuffle=True)

    model = FCN()
    bce = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)

    losses = []
    for epoch in range(EPOCHS):
        model.train()
        for x, m in loader:
            x, m = random_flip(x, m)
            logits = model(x)
            loss = bce(logits, m) + DICE_WEIGHT * soft_dice_loss(logits, m)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f}")

    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    fmt = lambda v: f"{v:.4f}" if math.isfinite(v) else "nan"
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
