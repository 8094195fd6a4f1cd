import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

IMG = 32
NUM_CLASSES = 3
N_IMAGES = 2048
BATCH = 32
STEPS = 250
COLOURS = torch.tensor([[220, 40, 40], [40, 200, 60], [50, 70, 230]], dtype=torch.float32)


def make_dataset(n, gen):
    """One coloured square per image on a noisy grey background; uint8 HWC like a decoded image."""
    imgs = 90 + 30 * torch.randn(n, IMG, IMG, 3, generator=gen)
    cls = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    side = torch.randint(6, 14, (n,), generator=gen)
    boxes = torch.zeros(n, 4)
    for i in range(n):
        s = int(side[i])
        x0 = int(torch.randint(0, IMG - s + 1, (1,), generator=gen))
        y0 = int(torch.randint(0, IMG - s + 1, (1,), generator=gen))
        imgs[i, y0:y0 + s, x0:x0 + s] = COLOURS[cls[i]] + 20 * torch.randn(s, s, 3, generator=gen)
        boxes[i] = torch.tensor([x0 + s / 2, y0 + s / 2, s, s])
    imgs = imgs.clamp(0, 255).round().to(torch.uint8)
    return imgs, boxes / IMG, cls


gen = torch.Generator().manual_seed(1)
raw, boxes, classes = make_dataset(N_IMAGES, gen)
images = raw.permute(0, 3, 1, 2).float() / 255.0


class TinyDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),   # 16x16
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),  # 8x8
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1),  # 4x4
            nn.ReLU(),
        )
        self.box_head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, 4),
        )
        self.cls_head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, NUM_CLASSES),
        )

    def forward(self, x):
        feat = self.backbone(x)
        return self.box_head(feat), self.cls_head(feat)


model = TinyDetector()
prior = 0.01
for m in model.modules():
    if isinstance(m, (nn.Conv2d, nn.Linear)):
        nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        nn.init.zeros_(m.bias)
nn.init.constant_(model.cls_head[-1].bias, -math.log((1 - prior) / prior))
box_loss_fn = nn.SmoothL1Loss(beta=0.1)
cls_loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.3, total_steps=STEPS, pct_start=0.2)

losses = []
for step in range(STEPS):
    idx = torch.randint(0, N_IMAGES, (BATCH,), generator=gen)
    xb, box_t, cls_t = images[idx], boxes[idx], classes[idx]
    box_p, cls_p = model(xb)
    loss_box = box_loss_fn(box_p, box_t)
    loss_cls = cls_loss_fn(cls_p, cls_t)
    loss = loss_box + loss_cls
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
    if step % 50 == 0:
        print(f"step {step} box {loss_box.item():.4f} cls {loss_cls.item():.4f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
