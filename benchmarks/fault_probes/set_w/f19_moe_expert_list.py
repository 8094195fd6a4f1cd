"""Mixture-of-experts MLP regressor with top-2 routing and a load-balancing loss.

The synthetic target follows a different nonlinear rule in each of four regions
of the input space (the signs of the first two features pick the region, with
soft borders), so a gate that routes regions to experts helps. Switch-style auxiliary loss keeps the
four experts in use; linear warmup of the learning rate with LambdaLR.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 0
IN_DIM = 8
D_MODEL = 64
D_HIDDEN = 128
N_EXPERTS = 4
TOP_K = 2
BATCH = 128
STEPS = 250
LR = 3e-3
WARMUP = 10
AUX_COEF = 0.01

torch.manual_seed(SEED)

# ----- synthetic data: four regions, one random teacher rule per region -----
g = torch.Generator().manual_seed(123)
teach_u = torch.randn(N_EXPERTS, IN_DIM, generator=g) / math.sqrt(IN_DIM)
teach_v = torch.randn(N_EXPERTS, IN_DIM, generator=g) / math.sqrt(IN_DIM)


def raw_target(x):
    rules = 2.0 * torch.tanh(2.0 * x @ teach_u.T) + x @ teach_v.T   # (B, 4) one rule per region
    a, b = torch.sigmoid(4 * x[:, 0]), torch.sigmoid(4 * x[:, 1])   # soft region membership
    w = torch.stack([(1 - a) * (1 - b), (1 - a) * b, a * (1 - b), a * b], dim=-1)
    return (w * rules).sum(-1)


_probe = torch.randn(20000, IN_DIM, generator=g)
_yp = raw_target(_probe)
Y_MEAN, Y_STD = _yp.mean(), _yp.std()


def sample_batch(n):
    x = torch.randn(n, IN_DIM)
    y = (raw_target(x) - Y_MEAN) / Y_STD
    return x, y


# ----- model -----
class Expert(nn.Module):
    def __init__(self, d_model, d_hidden):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_hidden, d_model)

    def forward(self, h):
        return self.fc2(self.act(self.fc1(h)))


class MoERegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(IN_DIM, D_MODEL)
        self.norm = nn.LayerNorm(D_MODEL)
        self.gate = nn.Linear(D_MODEL, N_EXPERTS)
        self.experts = [Expert(D_MODEL, D_HIDDEN) for _ in range(N_EXPERTS)]
        self.out_norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, 1)

    def forward(self, x):
        h = self.norm(self.inp(x))
        probs = F.softmax(self.gate(h), dim=-1)                    # (B, E)
        top_p, top_i = probs.topk(TOP_K, dim=-1)                   # (B, K)
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
        combine = torch.zeros_like(probs).scatter(1, top_i, top_p)  # (B, E)
        expert_out = torch.stack([e(h) for e in self.experts], dim=1)  # (B, E, D)
        mixed = (combine.unsqueeze(-1) * expert_out).sum(dim=1)
        y = self.head(self.out_norm(mixed)).squeeze(-1)
        # Switch-Transformer load balancing: fraction routed (top-1) x mean gate prob
        frac = F.one_hot(top_i[:, 0], N_EXPERTS).float().mean(dim=0)
        aux = N_EXPERTS * (frac * probs.mean(dim=0)).sum()
        return y, aux


model = MoERegressor()
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP))

losses = []
model.train()
for step in range(STEPS):
    x, y = sample_batch(BATCH)
    pred, aux = model(x)
    loss = F.mse_loss(pred, y) + AUX_COEF * aux
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
