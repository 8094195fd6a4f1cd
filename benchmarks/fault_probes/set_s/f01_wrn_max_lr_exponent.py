"""Small wide-residual network (pre-activation, GroupNorm) on synthetic 3x32x32 images.

SGD + nesterov momentum, OneCycleLR stepped every batch, label-smoothed cross-entropy,
random horizontal flips done by hand in the Dataset.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--max-lr", type=float, default=2e-4)
parser.add_argument("--width", type=int, default=2)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(args.seed)
NUM_CLASSES = 10
N_TRAIN = 1920


def make_data(n, num_classes, gen):
    # each class: a left-right symmetric colour template, images = template + noise + random brightness
    half = torch.randn(num_classes, 3, 8, 4, generator=gen)
    templates = torch.cat([half, half.flip(-1)], dim=-1)
    templates = F.interpolate(templates, size=(32, 32), mode="bilinear", align_corners=False)
    labels = torch.randint(0, num_classes, (n,), generator=gen)
    imgs = templates[labels] * (0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=gen))
    imgs = imgs + 1.6 * torch.randn(n, 3, 32, 32, generator=gen)
    # stored the way images usually arrive: uint8 pixels
    imgs = ((imgs * 40 + 128).clamp(0, 255)).to(torch.uint8)
    return imgs, labels


class FlipDataset(Dataset):
    def __init__(self, imgs, labels, train=True):
        self.imgs = imgs
        self.labels = labels
        self.train = train
        x = imgs.float() / 255.0
        self.mean = x.mean(dim=(0, 2, 3), keepdim=True)[0]
        self.std = x.std(dim=(0, 2, 3), keepdim=True)[0]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        img = self.imgs[idx].float() / 255.0
        img = (img - self.mean) / self.std
        if self.train and torch.rand(1).item() < 0.5:
            img = torch.flip(img, dims=[2])
        return img, self.labels[idx]


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride, groups=8):
        super().__init__()
        self.gn1 = nn.GroupNorm(min(groups, c_in), c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.gn2 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Conv2d(c_in, c_out, 1, stride, bias=False)

    def forward(self, x):
        o = F.relu(self.gn1(x))
        y = self.conv1(o)
        y = self.conv2(F.relu(self.gn2(y)))
        sc = x if self.shortcut is None else self.shortcut(o)
        return y + sc


class WideResNet(nn.Module):
    def __init__(self, width=2, num_classes=10):
        super().__init__()
        w = [8 * width, 16 * width, 32 * width]
        self.stem = nn.Conv2d(3, 8, 3, 2, 1, bias=False)
        self.layer1 = BasicBlock(8, w[0], 1)
        self.layer2 = BasicBlock(w[0], w[1], 2)
        self.layer3 = BasicBlock(w[1], w[2], 2)
        self.norm = nn.GroupNorm(8, w[2])
        self.fc = nn.Linear(w[2], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        x = F.relu(self.norm(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def smooth_cross_entropy(logits, target, smoothing=0.1):
    """cross-entropy against label-smoothed one-hot targets"""
    n = logits.size(-1)
    logp = F.log_softmax(logits, dim=-1)
    soft = torch.full_like(logp, smoothing / n)
    soft.scatter_(1, target.unsqueeze(1), 1.0 - smoothing + smoothing / n)
    return -(soft * logp).sum(dim=1).mean()


def main():
    gen = torch.Generator().manual_seed(1234)
    imgs, labels = make_data(N_TRAIN, NUM_CLASSES, gen)
    train_ds = FlipDataset(imgs, labels, train=True)
    loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True, drop_last=True)

    model = WideResNet(args.width, NUM_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.max_lr, momentum=0.9,
                                nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.max_lr, epochs=args.epochs,
                                                    steps_per_epoch=len(loader), pct_start=0.25)

    losses = []
    for epoch in range(args.epochs):
        model.train()
        correct = 0
        for x, y in loader:
            out = model(x)
            loss = smooth_cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            correct += (out.argmax(1) == y).sum().item()
        print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f} "
              f"acc {correct / (len(loader) * args.batch_size):.3f}")

    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    fmt = lambda v: f"{v:.4f}" if v == v and abs(v) != float("inf") else "nan"
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
