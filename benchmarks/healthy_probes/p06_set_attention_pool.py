"""Healthy probe 6: point-cloud / set classifier with variable set sizes, key_padding_mask and attention pooling."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3)
MAX_PTS, DIM, N_CLS = 40, 64, 3
g = torch.Generator().manual_seed(3)


def make_cloud(label):
    n = int(torch.randint(8, MAX_PTS + 1, (1,), generator=g))
    if label == 0:  # points on a circle
        t = torch.rand(n, generator=g) * 6.2832
        pts = torch.stack([t.cos(), t.sin(), torch.zeros(n)], -1)
    elif label == 1:  # points on a line
        t = torch.rand(n, generator=g) * 2 - 1
        pts = torch.stack([t, t, t], -1)
    else:  # gaussian blob
        pts = 0.5 * torch.randn(n, 3, generator=g)
    pts = pts + 0.05 * torch.randn(n, 3, generator=g)
    R, _ = torch.linalg.qr(torch.randn(3, 3, generator=g))
    return pts @ R


def make_batch(bs):
    y = torch.randint(0, N_CLS, (bs,), generator=g)
    x = torch.zeros(bs, MAX_PTS, 3)
    pad = torch.ones(bs, MAX_PTS, dtype=torch.bool)  # True = padding
    for i in range(bs):
        c = make_cloud(int(y[i]))
        x[i, :len(c)] = c
        pad[i, :len(c)] = False
    return x, pad, y


class SetTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(3, DIM), nn.ReLU(), nn.Linear(DIM, DIM))
        self.sab = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.norm1 = nn.LayerNorm(DIM)
        self.ff = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.ReLU(), nn.Linear(2 * DIM, DIM))
        self.norm2 = nn.LayerNorm(DIM)
        self.seed = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)  # PMA seed vector
        self.pool = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.head = nn.Linear(DIM, N_CLS)

    def forward(self, x, key_padding_mask):
        h = self.embed(x)
        a, _ = self.sab(h, h, h, key_padding_mask=key_padding_mask)
        h = self.norm1(h + a)
        h = self.norm2(h + self.ff(h))
        q = self.seed.expand(x.size(0), -1, -1)
        pooled, _ = self.pool(q, h, h, key_padding_mask=key_padding_mask)
        return self.head(pooled.squeeze(1))


model = SetTransformer()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
losses = []
for step in range(150):
    x, pad, y = make_batch(32)
    logits = model(x, pad)
    loss = F.cross_entropy(logits, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 30 == 0:
        acc = (logits.argmax(-1) == y).float().mean().item()
        print(f"step {step} loss {loss.item():.4f} acc {acc:.2f}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
