"""PointNet-style multi-label classifier: which primitive shapes does a point cloud contain?"""
import math

import torch
import torch.nn as nn

torch.manual_seed(0)

N_POINTS = 96
SHAPES = ["sphere", "cube", "disc", "segment", "ring"]
N_LABELS = len(SHAPES)
PRESENCE = torch.tensor([0.5, 0.35, 0.3, 0.2, 0.15])


def random_rotation(g):
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g))
    return q * torch.sign(torch.diagonal(r))


def sample_shape(kind, n, g):
    if kind == 0:
        p = torch.randn(n, 3, generator=g)
        p = p / p.norm(dim=1, keepdim=True)
    elif kind == 1:
        p = torch.rand(n, 3, generator=g) * 2 - 1
        face = torch.randint(0, 3, (n,), generator=g)
        side = torch.randint(0, 2, (n,), generator=g).float() * 2 - 1
        p[torch.arange(n), face] = side
    elif kind == 2:
        r = torch.rand(n, generator=g).sqrt()
        a = torch.rand(n, generator=g) * 2 * math.pi
        p = torch.stack([r * a.cos(), r * a.sin(), torch.zeros(n)], dim=1)
    elif kind == 3:
        s = torch.rand(n, generator=g) * 2 - 1
        p = torch.stack([s, torch.zeros(n), torch.zeros(n)], dim=1)
    else:
        a = torch.rand(n, generator=g) * 2 * math.pi
        p = torch.stack([a.cos(), a.sin(), torch.zeros(n)], dim=1)
    p = p @ random_rotation(g).T
    scale = 0.5 + torch.rand(1, generator=g)
    shift = torch.randn(1, 3, generator=g) * 1.5
    return p * scale + shift


def make_cloud(g):
    present = torch.rand(N_LABELS, generator=g) < PRESENCE
    if not present.any():
        present[torch.randint(0, N_LABELS, (1,), generator=g)] = True
    kinds = present.nonzero().flatten().tolist()
    counts = [N_POINTS // len(kinds)] * len(kinds)
    counts[0] += N_POINTS - sum(counts)
    pts = torch.cat([sample_shape(k, c, g) for k, c in zip(kinds, counts)])
    pts = pts + 0.02 * torch.randn(pts.shape, generator=g)
    pts = pts - pts.mean(dim=0, keepdim=True)
    pts = pts / pts.norm(dim=1).max()
    return pts, present.float()


g = torch.Generator().manual_seed(1)
clouds, labels = zip(*[make_cloud(g) for _ in range(768)])
X = torch.stack(clouds)          # (N, P, 3)
Y = torch.stack(labels)          # (N, L)

pos = Y.sum(dim=0)
pos_weight = (len(Y) - pos) / pos


class PointNet(nn.Module):
    def __init__(self, n_labels):
        super().__init__()
        self.point_mlp = nn.Sequential(
            nn.Conv1d(3, 64, 1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 128, 1),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Conv1d(128, 128, 1),
            nn.BatchNorm1d(128),
            nn.ReLU(),
        )
        self.head = nn.Sequential(
            nn.Linear(128, 128),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Linear(128, n_labels),
        )

    def forward(self, pts):
        x = self.point_mlp(pts.transpose(1, 2))   # (B, C, P)
        x = x.max(dim=2).values                    # symmetric pooling over points
        return self.head(x)


model = PointNet(N_LABELS)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)

epochs, batch_size = 10, 32
losses = []
model.train()
for epoch in range(epochs):
    perm = torch.randperm(len(X), generator=g)
    for i in range(0, len(X), batch_size):
        idx = perm[i:i + batch_size]
        pts, target = X[idx], Y[idx]
        logits = model(pts)
        loss = criterion(logits, target)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
