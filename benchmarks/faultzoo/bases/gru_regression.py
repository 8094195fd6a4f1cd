"""GRU regression on multichannel sensor sequences.

Family: recurrent (2-layer nn.GRU over 3 input channels, linear head on the
final hidden state), MSELoss on a [B] target, Adam.
Style: a @dataclass for the configuration, free functions (`make_dataset`,
`build_model`, `train`), per-channel standardisation of the inputs,
batches drawn with torch.randint.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Config:
    n_series: int = 1024
    length: int = 20
    channels: int = 3
    hidden: int = 32
    batch: int = 32
    steps: int = 150
    lr: float = 5e-3  # zoo: lr value=5e-3
    seed: int = 0


class SensorGRU(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self.gru = nn.GRU(channels, hidden, num_layers=2, batch_first=True)  # zoo: layer name=gru first=1 missing=1 frozen=1
        self.head = nn.Linear(hidden, 1)  # zoo: layer name=head head=1 missing=1 new="nn.Linear(32, 1)"

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h[-1]).squeeze(-1)  # zoo: logits | broadcast old=".squeeze(-1)" new=""


def make_dataset(cfg):
    g = torch.Generator().manual_seed(cfg.seed)
    t = torch.linspace(0, 1, cfg.length)
    freq = torch.rand(cfg.n_series, 1, generator=g) * 4 + 1
    phase = torch.rand(cfg.n_series, 1, generator=g) * 6.28
    amp = torch.rand(cfg.n_series, 1, generator=g) * 2 + 0.5
    wave = amp * torch.sin(6.28 * freq * t + phase)
    x = torch.stack([wave * 40 + 200, torch.cumsum(wave, 1) * 3, torch.randn(cfg.n_series, cfg.length, generator=g) * 5], dim=-1)  # zoo: inputs var=x
    y = amp.squeeze(1) * freq.squeeze(1) / 5  # zoo: targets var=y kind=real
    x = (x - x.mean(dim=(0, 1))) / x.std(dim=(0, 1))  # zoo: normalize zero="x[:, :, 2]"
    return x, y


def build_model(cfg):
    torch.manual_seed(cfg.seed)
    return SensorGRU(cfg.channels, cfg.hidden)


def train(cfg):
    x, y = make_dataset(cfg)
    model = build_model(cfg)  # zoo: model var=model
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)  # zoo: optimizer var=optimizer kind=adam
    criterion = nn.MSELoss()  # zoo: criterion kind=mse
    g = torch.Generator().manual_seed(cfg.seed + 1)
    model.train()  # zoo: train_mode
    for step in range(cfg.steps):  # zoo: loop
        idx = torch.randint(0, cfg.n_series, (cfg.batch,), generator=g)
        pred = model(x[idx])  # zoo: forward
        loss = criterion(pred, y[idx])  # zoo: loss kind=mse pred=pred target=y[idx] squeezed=1
        optimizer.zero_grad()  # zoo: zero_grad
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        if step % 30 == 0:
            print(f"step {step:3d}  mse {loss.item():.4f}")


if __name__ == "__main__":
    train(Config())
