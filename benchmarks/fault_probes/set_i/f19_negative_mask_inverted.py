import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

NUM_CLASSES = 20
IN_DIM = 48
STEPS = 250
P, K = 16, 8  # classes per batch, samples per class


def make_data(per_class=60):
    g = torch.Generator().manual_seed(3)
    centers = torch.randn(NUM_CLASSES, 8, generator=g)
    proj = torch.randn(8, IN_DIM, generator=g) / math.sqrt(8)
    mix = torch.randn(IN_DIM, IN_DIM, generator=g) / math.sqrt(IN_DIM)
    y = torch.arange(NUM_CLASSES).repeat_interleave(per_class)
    z = centers[y] + 0.6 * torch.randn(len(y), 8, generator=g)
    x = torch.tanh(z @ proj) @ mix + 0.3 * torch.randn(len(y), IN_DIM, generator=g)
    x = (x - x.mean(0)) / x.std(0)
    return x, y


class Embedder(nn.Module):
    def __init__(self, in_dim=IN_DIM, hidden=128, emb_dim=32):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )
        self.head = nn.Linear(hidden, emb_dim)

    def forward(self, x):
        return F.normalize(self.head(self.backbone(x)), dim=1)


def pk_batch(y, gen):
    classes = torch.randperm(NUM_CLASSES, generator=gen)[:P]
    idx = []
    for c in classes:
        members = (y == c).nonzero(as_tuple=True)[0]
        idx.append(members[torch.randperm(len(members), generator=gen)[:K]])
    return torch.cat(idx)


def mine_triplets(emb, labels, temp=0.2):
    # random positive, negative sampled with preference for close (hard) ones
    dist = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool)
    pos = torch.multinomial((same & ~eye).float(), 1).squeeze(1)
    w = torch.exp(-dist / temp).masked_fill(~same, 0.0)
    neg = torch.multinomial(w, 1).squeeze(1)
    return pos, neg


x, y = make_data()
gen = torch.Generator().manual_seed(7)

model = Embedder()
criterion = nn.TripletMarginLoss(margin=0.3)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)

losses = []
for step in range(STEPS):
    model.train()
    idx = pk_batch(y, gen)
    xb, yb = x[idx], y[idx]
    emb = model(xb)
    with torch.no_grad():
        pos, neg = mine_triplets(emb, yb)
    loss = criterion(emb, emb[pos], emb[neg])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
