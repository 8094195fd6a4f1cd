"""Healthy probe 1: pytorch/examples mnist-style CNN on synthetic 28x28 digits."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def make_data(n, g):
    # MNIST-like: each class is a fixed set of thick strokes on a black 28x28 canvas;
    # samples are randomly shifted, intensity-jittered copies, normalised like MNIST.
    templates = torch.zeros(10, 28, 28)
    for c in range(10):
        for _ in range(3):
            r0, c0, r1, c1 = torch.randint(6, 22, (4,), generator=g).tolist()
            for t in torch.linspace(0, 1, 40):
                r = int(r0 + t * (r1 - r0))
                cc = int(c0 + t * (c1 - c0))
                templates[c, r - 1:r + 2, cc - 1:cc + 2] = 1.0
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.zeros(n, 1, 28, 28)
    for i in range(n):
        dr, dc = torch.randint(-2, 3, (2,), generator=g).tolist()
        img = torch.roll(templates[y[i]], shifts=(dr, dc), dims=(0, 1))
        img = img * (0.7 + 0.3 * torch.rand(1, generator=g))
        x[i, 0] = (img + 0.1 * torch.rand(28, 28, generator=g) * (img > 0)).clamp(0, 1)
    x = (x - 0.1307) / 0.3081
    return x, y


def train(args, model, device, train_loader, optimizer, epoch, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: {loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    g = torch.Generator().manual_seed(args.seed)
    x, y = make_data(1280, g)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    losses = []
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, losses)
        scheduler.step()
    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {first:.4f} final loss {last:.4f} steps {len(losses)}")


if __name__ == "__main__":
    main()
