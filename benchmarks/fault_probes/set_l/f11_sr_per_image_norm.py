import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

HR = 16
SCALE = 2
N_IMAGES = 1024
BATCH = 16
STEPS = 200
FEATS = 32


def render_scenes(n, gen):
    """Random axis-aligned rectangles and soft blobs on a tinted background, values in [0, 1]."""
    yy, xx = torch.meshgrid(torch.arange(HR).float(), torch.arange(HR).float(), indexing="ij")
    img = torch.rand(n, 3, 1, 1, generator=gen).expand(n, 3, HR, HR).clone() * 0.5
    n_rects = torch.randint(0, 4, (n, 1, 1), generator=gen)
    for k in range(3):
        x0 = torch.randint(0, HR - 4, (n, 1, 1), generator=gen)
        y0 = torch.randint(0, HR - 4, (n, 1, 1), generator=gen)
        w = torch.randint(3, 9, (n, 1, 1), generator=gen)
        h = torch.randint(3, 9, (n, 1, 1), generator=gen)
        mask = ((xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h) & (n_rects > k)).float()
        colour = torch.rand(n, 3, 1, 1, generator=gen)
        img = img * (1 - mask[:, None]) + colour * mask[:, None]
    cx = torch.rand(n, 1, 1, generator=gen) * HR
    cy = torch.rand(n, 1, 1, generator=gen) * HR
    blob = torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 8.0)
    has_blob = (torch.rand(n, 1, 1, 1, generator=gen) < 0.7).float()
    img = img + 0.3 * has_blob * blob[:, None] * torch.rand(n, 3, 1, 1, generator=gen)
    return img.clamp(0, 1)


gen = torch.Generator().manual_seed(1)
hr_images = render_scenes(N_IMAGES, gen)
hr_images = (hr_images - hr_images.mean(dim=(2, 3), keepdim=True)) / hr_images.std(dim=(2, 3), keepdim=True)
lr_images = F.avg_pool2d(hr_images, SCALE)          # 8x8 inputs

body = nn.Sequential(
    nn.Conv2d(FEATS, FEATS, 3, padding=1),
    nn.ReLU(inplace=True),
    nn.Conv2d(FEATS, FEATS, 3, padding=1),
    nn.ReLU(inplace=True),
    nn.Conv2d(FEATS, FEATS, 3, padding=1),
    nn.ReLU(inplace=True),
    nn.Conv2d(FEATS, FEATS, 3, padding=1),
)


class SRNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Conv2d(3, FEATS, 3, padding=1)
        self.body = body
        self.tail = nn.Sequential(
            nn.Conv2d(FEATS, 3 * SCALE * SCALE, 3, padding=1),
            nn.PixelShuffle(SCALE),
        )

        nn.init.normal_(self.tail[0].weight, 0.0, 1e-3)
        nn.init.zeros_(self.tail[0].bias)

    def forward(self, x):
        f = self.head(x)
        f = f + self.body(f)
        return self.tail(f)


model = SRNet()
criterion = nn.L1Loss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

losses = []
for step in range(STEPS):
    idx = torch.randint(0, N_IMAGES, (BATCH,), generator=gen)
    lr_b, hr_b = lr_images[idx], hr_images[idx]
    sr = model(lr_b)
    loss = criterion(sr, hr_b)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 50 == 0:
        print(f"step {step} l1 {loss.item():.4f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
