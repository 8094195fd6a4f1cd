"""House-price-style regression trained with gradient accumulation.

Family: MLP regression (nn.Sequential inside a module), MSELoss on a [B, 1]
target, SGD with momentum; each micro-batch's loss is divided by the
accumulation count and the optimizer steps every ACCUM backward calls.
Style: `main()` with argparse, a DataLoader over a TensorDataset of
micro-batches, the accumulation counter kept by enumerate().
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class PriceModel(nn.Module):
    def __init__(self, n_features, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, hidden),  # zoo: layer name=net.0 first=1 init=1 relu=net.0,net.1 frozen=1
            nn.ReLU(),
            nn.Linear(hidden, hidden),  # zoo: layer name=net.2 init=1 relu=net.2,net.3 missing=1
            nn.ReLU(),
            nn.Linear(hidden, 1),  # zoo: layer name=net.4 head=1 missing=1 new="nn.Linear(64, 1)"
        )

    def forward(self, x):
        return self.net(x)  # zoo: logits


def synthetic_houses(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    price = 2.0 * x[:, 0] - 1.5 * x[:, 1] ** 2 + torch.relu(x[:, 2] * x[:, 3]) + 0.1 * torch.randn(n, generator=g)
    price = (price - price.mean()) / price.std()
    return x, price.unsqueeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--accum", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--lr", type=float, default=0.02)  # zoo: lr value=0.02
    args = ap.parse_args()

    torch.manual_seed(0)
    x, y = synthetic_houses(1024)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.micro_batch, shuffle=True)
    model = PriceModel(x.shape[1])  # zoo: model var=model relu=net.1,net.3
    criterion = nn.MSELoss()  # zoo: criterion kind=mse
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)  # zoo: optimizer var=optimizer kind=sgd

    model.train()  # zoo: train_mode
    optimizer.zero_grad()
    for epoch in range(args.epochs):  # zoo: loop
        epoch_loss = 0.0
        for i, (xb, yb) in enumerate(loader):
            pred = model(xb)  # zoo: forward
            loss = criterion(pred, yb) / args.accum  # zoo: loss kind=mse pred=pred target=yb
            loss.backward()  # zoo: backward
            epoch_loss += loss.item()
            if (i + 1) % args.accum == 0:
                optimizer.step()  # zoo: step per=batch
                optimizer.zero_grad()  # zoo: zero_grad
        print(f"epoch {epoch}: mse {epoch_loss * args.accum / len(loader):.4f}")


if __name__ == "__main__":
    main()
