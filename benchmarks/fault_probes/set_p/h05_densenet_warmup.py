import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 10
GROWTH = 8
BATCH = 32
LR = 3e-2
WEIGHT_DECAY = 1e-2
EPOCHS = 4

torch.manual_seed(0)


def make_images(n, templates):
    """Class templates (smooth random patterns) + a random shift + pixel noise, as 0..1 images."""
    y = torch.randint(0, NUM_CLASSES, (n,))
    x = templates[y]
    shifts = torch.randint(-3, 4, (n, 2))
    x = torch.stack([torch.roll(img, shifts=(int(s[0]), int(s[1])), dims=(1, 2)) for img, s in zip(x, shifts)])
    x = x + 0.25 * torch.randn_like(x)
    return x.clamp(0, 1), y


templates = F.interpolate(torch.rand(NUM_CLASSES, 3, 8, 8), size=32, mode="bilinear", align_corners=False)
x_train, y_train = make_images(1280, templates)
x_val, y_val = make_images(256, templates)
mean = x_train.mean(dim=(0, 2, 3), keepdim=True)
std = x_train.std(dim=(0, 2, 3), keepdim=True)
x_train, x_val = (x_train - mean) / std, (x_val - mean) / std


class DenseLayer(nn.Module):
    def __init__(self, in_ch, growth):
        super().__init__()
        self.bn = nn.BatchNorm2d(in_ch)
        self.conv = nn.Conv2d(in_ch, growth, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.cat([x, self.conv(F.relu(self.bn(x)))], dim=1)


class DenseBlock(nn.Module):
    def __init__(self, in_ch, n_layers, growth):
        super().__init__()
        self.layers = nn.ModuleList([DenseLayer(in_ch + i * growth, growth) for i in range(n_layers)])
        self.out_channels = in_ch + n_layers * growth

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Transition(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.bn = nn.BatchNorm2d(in_ch)
        self.conv = nn.Conv2d(in_ch, out_ch, 1, bias=False)
        self.pool = nn.AvgPool2d(2)

    def forward(self, x):
        return self.pool(self.conv(F.relu(self.bn(x))))


class SmallDenseNet(nn.Module):
    def __init__(self, growth=GROWTH, num_classes=NUM_CLASSES):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.block1 = DenseBlock(16, 3, growth)
        self.trans1 = Transition(self.block1.out_channels, self.block1.out_channels // 2)
        self.block2 = DenseBlock(self.block1.out_channels // 2, 3, growth)
        self.norm = nn.BatchNorm2d(self.block2.out_channels)
        self.classifier = nn.Linear(self.block2.out_channels, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.trans1(self.block1(x))
        x = self.block2(x)
        x = F.relu(self.norm(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def train(model, loader, optimizer, scheduler, losses):
    model.train()
    for x, y in loader:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=BATCH, shuffle=True, drop_last=True)
model = SmallDenseNet()
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
WARMUP = 30
scheduler = torch.optim.lr_scheduler.SequentialLR(
    optimizer,
    [
        torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.05, total_iters=WARMUP),
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * len(train_loader) - WARMUP),
    ],
    milestones=[WARMUP],
)

losses = []
for epoch in range(EPOCHS):
    train(model, train_loader, optimizer, scheduler, losses)
    val_loss, val_acc = evaluate(model, x_val, y_val)
    print(f"epoch {epoch} val loss {val_loss:.4f} val acc {val_acc:.3f}")


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
