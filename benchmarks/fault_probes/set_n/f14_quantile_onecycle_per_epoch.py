import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    context: int = 40  # months
    horizon: int = 5
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    dropout: float = 0.1
    quantiles: tuple = (0.1, 0.5, 0.9)
    batch_size: int = 24
    epochs: int = 5
    steps_per_epoch: int = 40
    max_lr: float = 0.3
    momentum: float = 0.9
    weight_decay: float = 1e-4
    seed: int = 0


def make_series(cfg, n, gen):
    """Seasonal series around a level, with a trend and noise; target = value `horizon` steps ahead."""
    length = cfg.context + cfg.horizon
    t = torch.arange(length, dtype=torch.float32)
    level = 20 + 80 * torch.rand(n, 1, generator=gen)
    period = 12.0  # monthly data, yearly season
    phase = torch.rand(n, 1, generator=gen) * 2 * math.pi
    amp = (0.05 + 0.1 * torch.rand(n, 1, generator=gen)) * level
    trend = (torch.rand(n, 1, generator=gen) - 0.5) * 0.002 * level
    clean = amp * torch.sin(2 * math.pi * t / period + phase) + trend * t
    noise = (0.1 + 0.1 * (clean.abs() / amp)) * amp * torch.randn(n, length, generator=gen)
    series = level + clean + noise
    x = series[:, : cfg.context].unsqueeze(-1)               # (B, T, 1)
    y = series[:, cfg.horizon : cfg.horizon + cfg.context]    # (B, T)
    return x, y


def scale(x, y):
    # per-series standardisation with the statistics of the context window
    mu = x.mean(dim=1, keepdim=True)
    sd = x.std(dim=1, keepdim=True) + 1e-5
    return (x - mu) / sd, (y - mu.squeeze(-1)) / sd.squeeze(-1)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        mask = torch.triu(torch.ones(cfg.context, cfg.context, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        k = k.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        v = v.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.n_heads)
        att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        out = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class QuantileForecaster(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.value_embed = nn.Linear(1, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, len(cfg.quantiles))

    def forward(self, x):
        B, T, _ = x.shape
        pos = torch.arange(T, device=x.device)
        h = self.value_embed(x) + self.pos_embed(pos)[None]
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))  # (B, T, Q)


def pinball_loss(pred, target, quantiles):
    # pred: (B, T, Q), target: (B, T)
    q = torch.tensor(quantiles, dtype=pred.dtype).view(1, 1, -1)
    diff = target.unsqueeze(-1) - pred
    return torch.maximum(q * diff, (q - 1) * diff).mean()


def train(cfg, model, gen):
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.max_lr, momentum=cfg.momentum,
                                weight_decay=cfg.weight_decay, nesterov=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg.max_lr, epochs=cfg.epochs,
                                                    steps_per_epoch=cfg.steps_per_epoch, pct_start=0.25)
    model.train()
    losses = []
    for epoch in range(cfg.epochs):
        for _ in range(cfg.steps_per_epoch):
            x, y = scale(*make_series(cfg, cfg.batch_size, gen))
            pred = model(x)
            loss = pinball_loss(pred, y, cfg.quantiles)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    return losses


@torch.no_grad()
def evaluate(cfg, model, gen):
    model.eval()
    x, y = scale(*make_series(cfg, 256, gen))
    pred = model(x)
    loss = pinball_loss(pred, y, cfg.quantiles).item()
    inside = ((y >= pred[..., 0]) & (y <= pred[..., -1])).float().mean().item()
    return loss, inside


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    model = QuantileForecaster(cfg)
    losses = train(cfg, model, torch.Generator().manual_seed(1))
    eval_loss, coverage = evaluate(cfg, model, torch.Generator().manual_seed(2))
    print(f"eval pinball {fmt(eval_loss)} coverage(10-90) {coverage:.3f}")
    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
