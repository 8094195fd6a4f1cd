import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--margin", type=float, default=1.0)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)

# synthetic "feature vectors": 12 identities, each a prototype plus per-sample noise
N_CLASSES, DIM, PER_CLASS = 12, 40, 120
prototypes = torch.randn(N_CLASSES, DIM) * 1.5
labels = torch.arange(N_CLASSES).repeat_interleave(PER_CLASS)
raw = prototypes[labels] + torch.randn(len(labels), DIM) * 1.2
features = raw * 40.0 + 300.0  # readings come in sensor units
order = torch.randperm(len(labels))
features, labels = features[order], labels[order]
features = (features - features.mean(0)) / features.std(0)


class PairDataset(Dataset):
    """Half positive pairs (same identity), half negative pairs."""

    def __init__(self, x, y, n_pairs, seed=0):
        g = torch.Generator().manual_seed(seed)
        by_class = [torch.nonzero(y == c).squeeze(1) for c in range(N_CLASSES)]
        first = torch.randint(0, len(x), (n_pairs,), generator=g)
        same = torch.rand(n_pairs, generator=g) < 0.5
        second = torch.empty(n_pairs, dtype=torch.long)
        for k in range(n_pairs):
            c = int(y[first[k]])
            if same[k]:
                pool = by_class[c]
            else:
                other = (c + int(torch.randint(1, N_CLASSES, (1,), generator=g))) % N_CLASSES
                pool = by_class[other]
            second[k] = pool[int(torch.randint(0, len(pool), (1,), generator=g))]
        self.x, self.a, self.b = x, first, second
        self.target = same.float()

    def __len__(self):
        return len(self.a)

    def __getitem__(self, i):
        return self.x[self.a[i]], self.x[self.b[i]], self.target[i]


class SiameseNet(nn.Module):
    def __init__(self, in_dim, hidden=128, emb_dim=16):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, emb_dim),
        )
        for m in self.encoder:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=1.0)
                nn.init.zeros_(m.bias)

    def embed(self, x):
        return self.encoder(x)

    def forward(self, x1, x2):
        return self.embed(x1), self.embed(x2)


def contrastive_loss(e1, e2, same, margin):
    d = F.pairwise_distance(e1, e2)
    pos = same * d.pow(2)
    neg = (1 - same) * F.relu(margin - d).pow(2)
    return 0.5 * (pos + neg).mean()


train_set = PairDataset(features, labels, n_pairs=1600)
loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)

model = SiameseNet(DIM)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.3)

losses = []
for epoch in range(args.epochs):
    model.train()
    for x1, x2, same in loader:
        e1, e2 = model(x1, x2)
        loss = contrastive_loss(e1, e2, same, args.margin)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
