import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_FEATURES = 32
N_CLASSES = 10
HIDDEN = 64
N_BLOCKS = 3
MICRO_BATCH = 32
ACCUM_STEPS = 4
TOTAL_STEPS = 150
WARMUP_STEPS = 15
BASE_LR = 3e-3
WEIGHT_DECAY = 0.05


def make_data(n):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, N_FEATURES, generator=g)
    w1 = torch.randn(N_FEATURES, 64, generator=g) / math.sqrt(N_FEATURES)
    w2 = torch.randn(64, N_CLASSES, generator=g) / 8.0
    y = (torch.tanh(x @ w1) @ w2).argmax(dim=1)
    perm = torch.randperm(n, generator=g)
    return x[perm], y[perm]


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResidualMLP(nn.Module):
    def __init__(self, in_dim, dim, n_blocks, n_classes):
        super().__init__()
        self.stem = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList([ResidualBlock(dim) for _ in range(n_blocks)])
        self.final_norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.final_norm(h))


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or "norm" in name:
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def cosine_with_warmup(warmup, total):
    def fn(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))
    return fn


def main():
    x_all, y_all = make_data(8192)
    model = ResidualMLP(N_FEATURES, HIDDEN, N_BLOCKS, N_CLASSES)
    optimizer = torch.optim.AdamW(param_groups(model, WEIGHT_DECAY), lr=BASE_LR, betas=(0.9, 0.98), eps=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(WARMUP_STEPS, TOTAL_STEPS))
    loss_fn = nn.CrossEntropyLoss()

    losses = []
    step_loss = 0.0
    micro = 0
    optimizer.zero_grad()
    while len(losses) < TOTAL_STEPS:
        idx = torch.randint(0, x_all.shape[0], (MICRO_BATCH,))
        xb, yb = x_all[idx], y_all[idx]
        logits = model(xb)
        loss = loss_fn(logits, yb) / ACCUM_STEPS
        loss.backward()
        step_loss += loss.item()
        micro += 1
        if micro % ACCUM_STEPS == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(step_loss)
            step_loss = 0.0

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"

    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
