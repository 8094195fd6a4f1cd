"""Set Transformer-style regressor: predict the spread of a 2-D point set.

Each sample is a set of 4..16 points (padded to PAD_TO); the target is the mean
distance of the points to their centroid. One self-attention block over the
elements, then attention pooling with a learned seed query (PMA).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--n-sets", type=int, default=2048)
parser.add_argument("--pad-to", type=int, default=20)
parser.add_argument("--dim", type=int, default=64)
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=1e-1)
parser.add_argument("--epochs", type=int, default=7)
args = parser.parse_args()

torch.manual_seed(0)


def make_sets(n, pad_to, min_size=4, max_size=16):
    """Point sets in pixel coordinates of a 640x480 frame."""
    sizes = torch.randint(min_size, max_size + 1, (n,))
    scale = torch.empty(n, 1, 1).uniform_(20.0, 100.0)
    centre = torch.stack([torch.empty(n).uniform_(160, 480), torch.empty(n).uniform_(120, 360)], 1)[:, None]
    pts = centre + scale * torch.randn(n, pad_to, 2)
    pad = torch.arange(pad_to)[None, :] >= sizes[:, None]          # True where padding
    return pts.masked_fill(pad[..., None], 0.0), pad


def set_spread(pts, pad):
    valid = (~pad).float()
    centroid = (pts * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)
    dist = (pts - centroid[:, None, :]).norm(dim=-1)
    return (dist * valid).sum(1) / valid.sum(1)


class SAB(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln1 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, h, pad):
        a, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        h = self.ln1(h + a)
        return self.ln2(h + self.ff(h))


class PMA(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.seed = nn.Parameter(torch.randn(1, 1, dim) * 0.1)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, h, pad):
        q = self.seed.expand(h.size(0), -1, -1)
        out, _ = self.attn(q, h, h, key_padding_mask=pad, need_weights=False)
        return out.squeeze(1)


class SetRegressor(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.embed = nn.Linear(2, dim)
        self.sab = SAB(dim, heads)
        self.pma = PMA(dim, heads)
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, x, pad):
        h = self.embed(x)
        h = self.sab(h, pad)
        return self.head(self.pma(h, pad))


pts, pad = make_sets(args.n_sets, args.pad_to)
valid = ~pad
mu = pts[valid].mean(0)
sigma = pts[valid].std(0).mean()
pts_n = ((pts - mu) / sigma).masked_fill(pad[..., None], 0.0)
target = set_spread(pts_n, pad)
loader = DataLoader(TensorDataset(pts_n, pad, target), batch_size=args.batch_size, shuffle=True)

model = SetRegressor(args.dim, args.heads)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

losses = []
for epoch in range(args.epochs):
    for x, m, y in loader:
        pred = model(x, m)
        loss = F.mse_loss(pred, y.unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch} loss {sum(losses[-32:]) / len(losses[-32:]):.4f}")


def fmt(v):
    return f"{v:.4f}" if v == v and abs(v) != float("inf") else "nan"


first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
