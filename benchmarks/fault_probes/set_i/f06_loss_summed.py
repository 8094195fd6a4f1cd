import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)

NUM_CLASSES = 10
EPOCHS = 20


def make_data(n=512):
    # each class is a smooth random template; samples are shifted, scaled, noisy copies
    g = torch.Generator().manual_seed(1)
    base = torch.randn(NUM_CLASSES, 3, 4, 4, generator=g)
    templates = F.interpolate(base, size=(16, 16), mode="bilinear", align_corners=False)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = templates[y]
    shifts = torch.randint(-2, 3, (n, 2), generator=g)
    x = torch.stack([torch.roll(xi, shifts=(int(s[0]), int(s[1])), dims=(1, 2)) for xi, s in zip(x, shifts)])
    x = x * (0.7 + 0.6 * torch.rand(n, 1, 1, 1, generator=g))
    x = x + 1.5 * torch.randn(x.shape, generator=g)
    x = (x - x.mean()) / x.std()
    return x, y


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                nn.BatchNorm2d(cout),
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 12, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(12)
        self.layer1 = BasicBlock(12, 12)
        self.layer2 = BasicBlock(12, 24, stride=2)
        self.layer3 = BasicBlock(24, 48, stride=2)
        self.fc = nn.Linear(48, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def mixup(x, y, alpha=0.4):
    lam = torch.from_numpy(np.random.beta(alpha, alpha, size=x.size(0))).float()
    idx = torch.randperm(x.size(0))
    xm = lam.view(-1, 1, 1, 1) * x + (1 - lam.view(-1, 1, 1, 1)) * x[idx]
    return xm, y, y[idx], lam


x, y = make_data()
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, drop_last=True)

model = ResNet()
criterion = nn.CrossEntropyLoss(reduction="none")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[12, 17], gamma=0.1)

losses = []
for epoch in range(EPOCHS):
    model.train()
    for xb, yb in loader:
        xm, ya, yb2, lam = mixup(xb, yb)
        out = model(xm)
        loss = (lam * criterion(out, ya) + (1 - lam) * criterion(out, yb2)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()

model.eval()
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"train accuracy {acc:.3f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
