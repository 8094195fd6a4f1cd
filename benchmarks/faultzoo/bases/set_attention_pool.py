"""Attention pooling over variable-size sets with a key padding mask.

Family: set model (per-element MLP encoder, one nn.MultiheadAttention
self-attention layer and a learned-query attention pooling, both with
key_padding_mask), regression of a set statistic with MSELoss, Adam.
Style: `main()`; padded batches and a boolean `key_padding_mask` (True = pad)
built by a `pad_sets()` helper from Python lists of tensors.
"""
import torch
import torch.nn as nn

MAX_SET = 12


class SetPool(nn.Module):
    def __init__(self, d_in=4, dim=32, heads=2):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(d_in, dim), nn.ReLU(), nn.Linear(dim, dim))  # zoo: layer name=embed first=1 frozen=1 missing=1
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)  # zoo: layer name=self_attn missing=1 frozen=1
        self.query = nn.Parameter(torch.randn(1, 1, dim) * 0.1)
        self.pool = nn.MultiheadAttention(dim, heads, batch_first=True)  # zoo: layer name=pool missing=1
        self.out = nn.Linear(dim, 1)  # zoo: layer name=out head=1 missing=1 new="nn.Linear(32, 1)"

    def forward(self, x, pad_mask):
        h = self.embed(x)
        a, _ = self.self_attn(h, h, h, key_padding_mask=pad_mask)
        h = h + a
        pooled, _ = self.pool(self.query.expand(len(x), -1, -1), h, h, key_padding_mask=pad_mask)
        return self.out(pooled[:, 0]).squeeze(-1)  # zoo: logits | broadcast old=".squeeze(-1)" new=""


def make_sets(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    sets, targets = [], []
    for _ in range(n):
        size = int(torch.randint(3, MAX_SET, (1,), generator=g))  # always at least one pad slot
        s = torch.randn(size, 4, generator=g)
        sets.append(s)
        targets.append((s[:, 0] * s[:, 1]).mean() + s[:, 2].max())
    return sets, torch.stack(targets)


def pad_sets(sets):
    x = torch.zeros(len(sets), MAX_SET, 4)  # zoo: inputs var=x
    for i, s in enumerate(sets):
        x[i, :len(s)] = s
    lengths = torch.tensor([len(s) for s in sets])
    pad_mask = torch.arange(MAX_SET)[None, :] >= lengths[:, None]  # zoo: mask kind=key_padding var=pad_mask
    return x, pad_mask


def main():
    torch.manual_seed(0)
    sets, targets = make_sets(1024)  # zoo: targets var=targets kind=real
    model = SetPool()  # zoo: model var=model attn=self_attn,pool
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # zoo: optimizer var=optimizer kind=adam | lr value=3e-3
    criterion = nn.MSELoss()  # zoo: criterion kind=mse
    g = torch.Generator().manual_seed(1)
    for step in range(150):  # zoo: loop
        idx = torch.randint(0, len(sets), (32,), generator=g).tolist()
        x, pad_mask = pad_sets([sets[i] for i in idx])
        pred = model(x, pad_mask)  # zoo: forward
        loss = criterion(pred, targets[idx])  # zoo: loss kind=mse pred=pred target=targets[idx]
        optimizer.zero_grad()  # zoo: zero_grad
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        if step % 30 == 0:
            print(f"step {step}: mse {loss.item():.4f}")


if __name__ == "__main__":
    main()
