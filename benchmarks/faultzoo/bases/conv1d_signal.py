"""1-D convolutional regression on multichannel signals.

Family: 1-D CNN (Conv1d + ReLU + pooling, global max-pool, linear head),
MSELoss on a [B, 1] target (the signal's decay rate), Adam,
ReduceLROnPlateau stepped once per epoch on the epoch's mean loss.
Style: a generic Keras-like `fit(model, loader, loss_fn, optimizer, epochs)`
helper that knows nothing about the task, a `build()` that returns the model,
per-channel standardisation with statistics over the whole set.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def build(channels=4, width=16):
    return nn.Sequential(  # zoo: relu=1,4
        nn.Conv1d(channels, width, kernel_size=5, padding=2),  # zoo: layer name=0 first=1 frozen=1 missing=1
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Conv1d(width, width, kernel_size=5, padding=2),  # zoo: layer name=3 missing=1 frozen=1
        nn.ReLU(),
        nn.AdaptiveMaxPool1d(1),
        nn.Flatten(),
        nn.Linear(width, 1),  # zoo: layer name=7 head=1 missing=1 new="nn.Linear(16, 1)" seq=1
    )


def fit(model, loader, loss_fn, optimizer, epochs, scheduler=None):
    for epoch in range(epochs):  # zoo: loop
        model.train()  # zoo: train_mode
        total = 0.0
        for xb, yb in loader:
            pred = model(xb)  # zoo: forward
            loss = loss_fn(pred, yb)  # zoo: loss kind=mse pred=pred target=yb
            optimizer.zero_grad()  # zoo: zero_grad
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
            total += loss.item()
        if scheduler is not None:
            scheduler.step(total / len(loader))  # zoo: sched_step per=epoch plateau=1
        print(f"epoch {epoch}: loss {total / len(loader):.4f}")


def signals(n=768, length=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length).float()
    rate = torch.rand(n, 1, generator=g) * 0.08 + 0.01
    base = torch.exp(-rate * t) * torch.cos(0.4 * t + torch.rand(n, 1, generator=g) * 3)
    chans = [base * 500, base ** 2 * 50 + 20, torch.randn(n, length, generator=g), base.cumsum(1)]
    x = torch.stack(chans, dim=1)  # zoo: inputs var=x
    y = rate * 10  # zoo: targets var=y kind=real | broadcast old="rate * 10" new="rate.squeeze(1) * 10"
    mean, std = x.mean(dim=(0, 2), keepdim=True), x.std(dim=(0, 2), keepdim=True)
    x = (x - mean) / std  # zoo: normalize zero="x[:, 2]"
    return x, y


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = signals()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = build()  # zoo: model var=model
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # zoo: optimizer var=optimizer kind=adam | lr value=3e-3
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)  # zoo: sched var=plateau per=epoch plateau=1
    fit(model, loader, nn.MSELoss(), optimizer, epochs=6, scheduler=plateau)  # zoo: criterion kind=mse inline=1
