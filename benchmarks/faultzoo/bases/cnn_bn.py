"""Small CNN with BatchNorm on synthetic grey-scale images.

Family: CNN (Conv2d + BatchNorm2d + max-pooling), 4-class CrossEntropyLoss,
SGD with momentum, StepLR stepped once per epoch.
Style: `main()` with argparse options, a TensorDataset and a DataLoader,
images stored as uint8 0-255 and scaled to [0, 1] as a tensor transform.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_images(n, size=16, n_classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    templates = torch.stack([
        (xx // 2 % 2).float(),            # vertical stripes
        (yy // 2 % 2).float(),            # horizontal stripes
        ((xx + yy) // 3 % 2).float(),     # diagonal stripes
        (((xx - 8) ** 2 + (yy - 8) ** 2) < 20).float(),  # a blob
    ])
    labels = torch.randint(0, n_classes, (n,), generator=g)
    noise = torch.rand(n, size, size, generator=g)
    images = 0.15 * templates[labels] + 0.85 * noise
    return (images * 255).to(torch.uint8).unsqueeze(1), labels


class ConvNet(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)  # zoo: layer name=conv1 first=1 missing=1 frozen=1
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)  # zoo: layer name=conv2
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(16 * 4 * 4, n_classes)  # zoo: layer name=fc head=1 init=1 missing=1 new="nn.Linear(16 * 4 * 4, 4)"

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))  # zoo: cut var=x upstream=conv1,bn1
        x = self.pool(self.relu(self.bn2(self.conv2(x))))  # zoo: cut var=x upstream=conv1,bn1,conv2,bn2
        x = x.flatten(1)  # zoo: act var=x next=fc
        return self.fc(x)  # zoo: logits


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)  # zoo: lr value=0.05
    args = parser.parse_args()

    torch.manual_seed(0)
    images, labels = make_images(640)
    images = images.float() / 255.0  # zoo: pixels
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch_size, shuffle=True)

    model = ConvNet()  # zoo: model var=model bn=bn1,bn2 relu=relu
    criterion = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # zoo: optimizer var=optimizer kind=sgd
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)  # zoo: sched var=scheduler per=epoch

    for epoch in range(args.epochs):  # zoo: loop
        model.train()  # zoo: train_mode
        total, correct, seen = 0.0, 0, 0
        for x, y in loader:
            optimizer.zero_grad()  # zoo: zero_grad
            out = model(x)  # zoo: forward
            loss = criterion(out, y)  # zoo: loss kind=ce pred=out target=y classes=4
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
            total += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
        scheduler.step()  # zoo: sched_step per=epoch
        print(f"epoch {epoch + 1}: loss {total / seen:.4f} acc {correct / seen:.3f}")


if __name__ == "__main__":
    main()
