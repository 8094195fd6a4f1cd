import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class PatternDataset(Dataset):
    """Synthetic 1x28x28 images, each class draws a different stroke pattern."""

    def __init__(self, n, num_classes=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, num_classes, (n,), generator=g)
        imgs = torch.zeros(n, 1, 28, 28)
        for i in range(n):
            c = int(self.labels[i])
            r, s = torch.randint(4, 24, (2,), generator=g).tolist()
            if c == 0:  # horizontal bar
                imgs[i, 0, r - 1:r + 2, 3:25] = 1.0
            elif c == 1:  # vertical bar
                imgs[i, 0, 3:25, s - 1:s + 2] = 1.0
            elif c == 2:  # diagonal
                o = s - 14
                for k in range(20):
                    imgs[i, 0, 4 + k, min(max(4 + k + o, 0), 27)] = 1.0
                    imgs[i, 0, 4 + k, min(max(5 + k + o, 0), 27)] = 1.0
            else:  # square blob
                imgs[i, 0, r - 3:r + 3, s - 3:s + 3] = 1.0
        imgs += 0.45 * torch.randn(imgs.shape, generator=g)
        self.images = (imgs - imgs.mean()) / imgs.std()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.images[idx], self.labels[idx]


class SmallCNN(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 7 * 7, 64),
            nn.ReLU(),
            nn.Dropout(0.25),
            nn.Linear(64, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def fmt(v):
    return f"{v:.4f}" if v == v and abs(v) != float("inf") else "nan"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--n-train", type=int, default=1600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_set = PatternDataset(args.n_train, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)

    model = SmallCNN(num_classes=4)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.3)

    losses = []
    for epoch in range(args.epochs):
        model.train()
        correct = 0
        for images, labels in loader:
            logits = model(images)
            loss = criterion(logits, labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            correct += (logits.argmax(1) == labels).sum().item()
        scheduler.step()
        print(f"epoch {epoch} loss {sum(losses[-50:]) / 50:.4f} acc {correct / len(train_set):.3f}")

    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
