import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

NUM_CLASSES = 4
IMG = 16
N_TRAIN = 2048
N_VAL = 512
BATCH = 32
EPOCHS = 3


def make_images(n, gen):
    """Striped / checkered textures with a random tint, stored like decoded images (uint8, NHWC)."""
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    yy, xx = torch.meshgrid(torch.arange(IMG).float(), torch.arange(IMG).float(), indexing="ij")
    freq = 0.6 + 0.6 * torch.rand(n, 1, 1, generator=gen)
    phase = 2 * math.pi * torch.rand(n, 1, 1, generator=gen)
    horiz = torch.sin(freq * yy + phase)
    vert = torch.sin(freq * xx + phase)
    diag = torch.sin(freq * (xx + yy) / 1.4 + phase)
    check = torch.sin(freq * xx + phase) * torch.sin(freq * yy + phase) * 1.5
    pats = torch.stack([horiz, vert, diag, check], 1)            # n, 4, H, W
    pat = pats[torch.arange(n), labels]                           # n, H, W
    tint = 0.4 + 0.6 * torch.rand(n, 1, 1, 3, generator=gen)
    img = 0.5 + 0.35 * pat[..., None] * tint + 0.25 * torch.randn(n, IMG, IMG, 3, generator=gen)
    img = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    return img, labels


gen = torch.Generator().manual_seed(1)
raw, labels = make_images(N_TRAIN + N_VAL, gen)

x = raw.permute(0, 3, 1, 2).float() / 255.0
mean = x.mean(dim=(0, 2, 3), keepdim=True)
std = x.std(dim=(0, 2, 3), keepdim=True)
x = (x - mean) / std

perm = torch.randperm(len(x), generator=gen)
train_idx, val_idx = perm[:N_TRAIN], perm[N_TRAIN:]
x_train, y_train = x[train_idx], labels[train_idx]
x_val, y_val = x[val_idx], labels[val_idx]

train_ds = TensorDataset(x_train, y_train)
loader = DataLoader(train_ds, batch_size=BATCH, shuffle=True, drop_last=True,
                    generator=torch.Generator().manual_seed(2))


class DepthwiseSeparable(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.act1 = nn.Hardswish()
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.act2 = nn.Hardswish()

    def forward(self, x):
        x = self.act1(self.bn1(self.dw(x)))
        return self.act2(self.bn2(self.pw(x)))


class MobileNetTiny(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
        )
        self.blocks = nn.Sequential(
            DepthwiseSeparable(16, 32, 2),
            DepthwiseSeparable(32, 64, 2),
            DepthwiseSeparable(64, 64, 1),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x = self.pool(x).flatten(1)
        return self.classifier(x)


model = MobileNetTiny()
for m in model.modules():
    if isinstance(m, nn.Conv2d):
        nn.init.kaiming_normal_(m.weight, mode="fan_out")
    elif isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, 0, 0.01)
        nn.init.zeros_(m.bias)

criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=len(loader), eta_min=1e-4)

losses = []
step = 0
model.train()
for epoch in range(EPOCHS):
    for xb, yb in loader:
        logits = model(xb)
        loss = criterion(logits, yb)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.01)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        step += 1
    print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f}")

model.eval()
with torch.no_grad():
    val_acc = (model(x_val).argmax(1) == y_val).float().mean().item()
print(f"val acc {val_acc:.3f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


init = sum(losses[:5]) / 5
final = sum(losses[-5:]) / 5
print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {step}")
