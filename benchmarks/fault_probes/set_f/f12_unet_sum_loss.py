import math
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(0)

NUM_CLASSES = 3
SIZE = 24
EPOCHS = 4


class ShapesDataset(Dataset):
    """Noisy images with filled rectangles; class 1 rectangles are bright, class 2 are striped."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.images = 0.8 * torch.randn(n, SIZE, SIZE, 3, generator=g)  # stored HWC
        self.masks = torch.zeros(n, SIZE, SIZE, dtype=torch.long)
        stripes = (torch.arange(SIZE) % 4 < 2).float().view(SIZE, 1, 1)
        for i in range(n):
            for cls in (1, 2):
                h, w = torch.randint(5, 11, (2,), generator=g).tolist()
                r = torch.randint(0, SIZE - h, (1,), generator=g).item()
                c = torch.randint(0, SIZE - w, (1,), generator=g).item()
                if cls == 1:
                    self.images[i, r:r + h, c:c + w, :] += 1.0
                else:
                    self.images[i, r:r + h, c:c + w, :] += 2.0 * stripes[r:r + h] - 0.5
                self.masks[i, r:r + h, c:c + w] = cls

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, idx):
        image = self.images[idx].permute(2, 0, 1)
        return image, self.masks[idx]


def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class SmallUNet(nn.Module):
    def __init__(self, in_ch=3, num_classes=NUM_CLASSES):
        super().__init__()
        self.down1 = conv_block(in_ch, 16)
        self.pool1 = nn.MaxPool2d(2)
        self.down2 = conv_block(16, 32)
        self.pool2 = nn.MaxPool2d(2)
        self.bottleneck = conv_block(32, 64)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = conv_block(64, 32)
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.dec1 = conv_block(32, 16)
        self.out = nn.Conv2d(16, num_classes, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool1(d1))
        b = self.bottleneck(self.pool2(d2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.out(u1)


train_set = ShapesDataset(640, seed=1)
loader = DataLoader(train_set, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(2))

model = SmallUNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.1)
criterion = nn.CrossEntropyLoss(reduction="sum")

losses = []
for epoch in range(EPOCHS):
    model.train()
    for images, masks in loader:
        logits = model(images)
        loss = criterion(logits, masks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    print(f"epoch {epoch} loss {losses[-1]:.4f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
