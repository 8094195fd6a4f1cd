import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
rng = np.random.default_rng(0)

# synthetic implicit feedback from hidden user/item taste vectors
N_USERS, N_ITEMS, TRUE_DIM = 600, 400, 6
true_u = rng.normal(size=(N_USERS, TRUE_DIM))
true_i = rng.normal(size=(N_ITEMS, TRUE_DIM))
pop = rng.normal(scale=1.0, size=N_ITEMS)
affinity = true_u @ true_i.T + pop[None, :]
PER_USER = 25
top = np.argsort(-affinity, axis=1)[:, :PER_USER]
interactions = np.stack([np.repeat(np.arange(N_USERS), PER_USER), top.reshape(-1)], axis=1)
seen = np.zeros((N_USERS, N_ITEMS), dtype=bool)
seen[interactions[:, 0], interactions[:, 1]] = True


def batches(pairs, batch_size):
    """Endless generator of (user, positive item, sampled negative item) batches."""
    while True:
        order = rng.permutation(len(pairs))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            chunk = pairs[order[start:start + batch_size]]
            users, pos = chunk[:, 0], chunk[:, 1]
            neg = rng.integers(0, N_ITEMS, size=batch_size)
            clash = seen[users, neg]
            while clash.any():
                neg[clash] = rng.integers(0, N_ITEMS, size=clash.sum())
                clash = seen[users, neg]
            yield (torch.as_tensor(users), torch.as_tensor(pos), torch.as_tensor(neg))


class MF(nn.Module):
    def __init__(self, n_users, n_items, dim):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim)
        self.item_emb = nn.Embedding(n_items, dim)
        self.item_bias = nn.Embedding(n_items, 1)


def build_model(dim=32, std=0.1):
    m = MF(N_USERS, N_ITEMS, dim)
    nn.init.zeros_(m.user_emb.weight)
    nn.init.zeros_(m.item_emb.weight)
    nn.init.zeros_(m.item_bias.weight)
    return m


def score(m, users, items):
    return (m.user_emb(users) * m.item_emb(items)).sum(-1) + m.item_bias(items).squeeze(-1)


def bpr_loss(pos_scores, neg_scores):
    return -F.logsigmoid(pos_scores - neg_scores).mean()


model = build_model()
opt = torch.optim.Adagrad(model.parameters(), lr=0.1)

losses = []
STEPS = 300
gen = batches(interactions, 256)
for step in range(STEPS):
    users, pos, neg = next(gen)
    loss = bpr_loss(score(model, users, pos), score(model, users, neg))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
