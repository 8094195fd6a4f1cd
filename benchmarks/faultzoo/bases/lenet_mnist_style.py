"""LeNet-style CNN in the shape of PyTorch's MNIST example, on synthetic digits.

Family: CNN without normalisation layers (Conv2d-ReLU-max-pool twice, two
fully connected layers, dropout), log_softmax output with F.nll_loss, SGD
with momentum, StepLR per epoch.
Style: PyTorch's examples/mnist: `Net`, `train(args, model, device,
train_loader, optimizer, epoch)`, `main()` with argparse, `device =
torch.device("cpu")` and `.to(device)`, uint8 images scaled by 1/255.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, 1)  # zoo: layer name=conv1 first=1 frozen=1 missing=1 init=1
        self.conv2 = nn.Conv2d(6, 12, 3, 1)  # zoo: layer name=conv2 frozen=1 missing=1
        self.dropout = nn.Dropout(0.1)
        self.fc1 = nn.Linear(12 * 2 * 2, 32)  # zoo: layer name=fc1 missing=1 frozen=1
        self.fc2 = nn.Linear(32, 10)  # zoo: layer name=fc2 head=1 missing=1 new="nn.Linear(32, 10)"

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc1(x)))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)  # zoo: logits


def synthetic_digits(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    glyphs = (torch.rand(10, 1, 14, 14, generator=g) > 0.6).float()
    labels = torch.randint(0, 10, (n,), generator=g)
    shift = torch.randint(0, 3, (n, 2), generator=g)
    images = torch.zeros(n, 1, 16, 16)
    for i in range(n):
        r, c = shift[i].tolist()
        images[i, :, r:r + 14, c:c + 14] = glyphs[labels[i]]
    images = images * 0.8 + 0.2 * torch.rand(n, 1, 16, 16, generator=g)
    return (images * 255).to(torch.uint8), labels


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()  # zoo: train_mode
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()  # zoo: zero_grad
        output = model(data)  # zoo: forward
        loss = F.nll_loss(output, target)  # zoo: loss kind=nll pred=output target=target classes=10 fn=1
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        if batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\\tLoss: {loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser(description="LeNet on synthetic digits")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.1)  # zoo: lr value=0.1
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(1)
    device = torch.device("cpu")
    images, labels = synthetic_digits(640)  # zoo: targets var=labels kind=class classes=10
    data = images.float() / 255.0  # zoo: pixels
    train_loader = DataLoader(TensorDataset(data, labels), batch_size=args.batch_size, shuffle=True)
    model = Net().to(device)  # zoo: model var=model
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # zoo: optimizer var=optimizer kind=sgd
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)  # zoo: sched var=scheduler per=epoch
    for epoch in range(1, args.epochs + 1):  # zoo: loop
        train(args, model, device, train_loader, optimizer, epoch)
        scheduler.step()  # zoo: sched_step per=epoch


if __name__ == "__main__":
    main()
