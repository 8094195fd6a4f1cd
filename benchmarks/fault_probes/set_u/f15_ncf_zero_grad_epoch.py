"""Neural collaborative filtering (GMF + MLP, NeuMF-style) on synthetic implicit feedback.

Users and items have hidden taste vectors; a user has interacted with an item when
their affinity is high. Each epoch the positives are paired with freshly sampled
negatives and a new DataLoader is built over (user, item, label).
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

N_USERS = 300
N_ITEMS = 200
LATENT = 6
GMF_DIM = 16
MLP_DIM = 16
NEG_PER_POS = 3
BATCH_SIZE = 2048
LR = 1e-2
EPOCHS = 15

torch.manual_seed(0)


def make_interactions():
    u_taste = torch.randn(N_USERS, LATENT)
    i_taste = torch.randn(N_ITEMS, LATENT)
    affinity = u_taste @ i_taste.T
    threshold = affinity.quantile(0.9, dim=1, keepdim=True)    # each user likes ~10% of items
    return affinity >= threshold


def sample_epoch(liked):
    pos_u, pos_i = liked.nonzero(as_tuple=True)
    neg_u = pos_u.repeat_interleave(NEG_PER_POS)
    neg_i = torch.randint(0, N_ITEMS, (neg_u.numel(),))
    keep = ~liked[neg_u, neg_i]                                   # drop accidental positives
    neg_u, neg_i = neg_u[keep], neg_i[keep]
    users = torch.cat([pos_u, neg_u])
    items = torch.cat([pos_i, neg_i])
    labels = torch.cat([torch.ones(pos_u.numel()), torch.zeros(neg_u.numel())])
    return TensorDataset(users, items, labels)


class NeuMF(nn.Module):
    def __init__(self, n_users, n_items, gmf_dim, mlp_dim):
        super().__init__()
        self.gmf_user = nn.Embedding(n_users, gmf_dim)
        self.gmf_item = nn.Embedding(n_items, gmf_dim)
        self.mlp_user = nn.Embedding(n_users, mlp_dim)
        self.mlp_item = nn.Embedding(n_items, mlp_dim)
        self.mlp = nn.Sequential(
            nn.Linear(2 * mlp_dim, 32), nn.ReLU(),
            nn.Linear(32, 16), nn.ReLU(),
        )
        self.out = nn.Linear(gmf_dim + 16, 1)
        for emb in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, std=0.1)

    def forward(self, u, i):
        gmf = self.gmf_user(u) * self.gmf_item(i)
        mlp = self.mlp(torch.cat([self.mlp_user(u), self.mlp_item(i)], dim=-1))
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)


liked = make_interactions()
model = NeuMF(N_USERS, N_ITEMS, GMF_DIM, MLP_DIM)
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=LR)

losses = []
for epoch in range(EPOCHS):
    loader = DataLoader(sample_epoch(liked), batch_size=BATCH_SIZE, shuffle=True)
    optimizer.zero_grad()
    for u, i, y in loader:
        logits = model(u, i)
        loss = criterion(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch} batches {len(loader)} loss {losses[-1]:.4f}")


def fmt(v):
    return f"{v:.4f}" if v == v and abs(v) != float("inf") else "nan"


first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
