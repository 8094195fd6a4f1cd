"""Dilated residual 1D-conv forecaster: next 8 values of the load channel from 4 sensor channels."""
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

IN_CH, WINDOW, HORIZON = 4, 64, 8


def make_series(n, seed=1):
    """Four channels sharing a base rhythm; channel 0 (load) is the one we forecast."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(WINDOW + HORIZON).float()
    f = 0.03 + 0.12 * torch.rand(n, 1, generator=g)
    ph = 2 * math.pi * torch.rand(n, 3, generator=g)
    amp = 0.5 + torch.rand(n, 1, generator=g)
    s1 = torch.sin(2 * math.pi * f * t + ph[:, :1])
    s2 = torch.sin(4 * math.pi * f * t + ph[:, 1:2])
    s3 = torch.sin(math.pi * f * t + ph[:, 2:3])
    load = amp * s1 + 0.4 * s2 + 0.3 * s3
    temp = torch.cos(2 * math.pi * f * t + ph[:, :1])
    humid = s3 + 0.5 * s2
    trend = (t / (WINDOW + HORIZON)) * amp
    x = torch.stack([load, temp, humid, trend], dim=1)
    x = x + 0.05 * torch.randn(x.shape, generator=g)
    scale = torch.tensor([12.0, 4.0, 25.0, 2.0]).view(1, IN_CH, 1)
    offset = torch.tensor([60.0, 15.0, 300.0, -5.0]).view(1, IN_CH, 1)
    return x * scale + offset


class ResBlock(nn.Module):
    def __init__(self, ch, dilation, p_drop=0.1):
        super().__init__()
        self.conv1 = nn.Conv1d(ch, ch, 3, padding=dilation, dilation=dilation)
        self.norm1 = nn.GroupNorm(4, ch)
        self.conv2 = nn.Conv1d(ch, ch, 3, padding=dilation, dilation=dilation)
        self.norm2 = nn.GroupNorm(4, ch)
        self.act = nn.SiLU()
        self.drop = nn.Dropout(p_drop)

    def forward(self, x):
        h = self.act(self.norm1(self.conv1(x)))
        h = self.drop(h)
        h = self.norm2(self.conv2(h))
        return self.act(x + h)


class Forecaster(nn.Module):
    def __init__(self, mean, std, in_ch=IN_CH, ch=16, horizon=HORIZON, dilations=(1, 2, 4, 8)):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.stem = nn.Conv1d(in_ch, ch, 1)
        self.blocks = nn.Sequential(*[ResBlock(ch, d) for d in dilations])
        self.head = nn.Linear(ch, horizon)

    def forward(self, x):
        # fixed input standardisation, not learned
        with torch.no_grad():
            x = (x - self.mean) / self.std
        h = self.blocks(self.stem(x))
        return self.head(h[:, :, -1])


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


def main():
    series = make_series(960)
    x_raw, y_raw = series[:, :, :WINDOW], series[:, 0, WINDOW:]

    mean = x_raw.mean(dim=(0, 2), keepdim=True)
    std = x_raw.std(dim=(0, 2), keepdim=True)
    y = (y_raw - mean[:, 0]) / std[:, 0]

    loader = DataLoader(TensorDataset(x_raw, y), batch_size=32, shuffle=True,
                        generator=torch.Generator().manual_seed(2))

    model = Forecaster(mean, std)
    epochs = 8
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2, eps=1e-1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    criterion = nn.SmoothL1Loss()

    losses = []
    for epoch in range(epochs):
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            pred = model(xb)
            loss = criterion(pred, yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.2e} loss {sum(losses[-len(loader):]) / len(loader):.4f}")

    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
