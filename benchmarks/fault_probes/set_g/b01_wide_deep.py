"""Wide & deep click-through model on synthetic impressions."""
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)

N_USERS, N_ITEMS, N_CATS = 200, 150, 24
MAX_CATS = 4
N_DENSE = 6
N_SAMPLES = 8000


def make_impressions(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    user = torch.randint(0, N_USERS, (n,), generator=g)
    item = torch.randint(0, N_ITEMS, (n,), generator=g)

    # every item has 1..4 categories (ids 1..N_CATS-1), padded with 0
    item_cats = torch.zeros(N_ITEMS, MAX_CATS, dtype=torch.long)
    for i in range(N_ITEMS):
        k = int(torch.randint(1, MAX_CATS + 1, (1,), generator=g))
        item_cats[i, :k] = torch.randperm(N_CATS - 1, generator=g)[:k] + 1
    cats = item_cats[item]

    # raw dense features: price, user age, hour of day, item views, dwell seconds, score
    price = torch.exp(torch.randn(n, generator=g) * 0.8 + 3.5)
    age = torch.randint(18, 70, (n,), generator=g).float()
    hour = torch.randint(0, 24, (n,), generator=g).float()
    stats = torch.randn(n, 3, generator=g) * torch.tensor([800.0, 60.0, 1.0]) + torch.tensor([3000.0, 120.0, 0.0])
    dense_raw = torch.cat([price[:, None], age[:, None], hour[:, None], stats], dim=1)

    # planted click model
    u_lat = torch.randn(N_USERS, 4, generator=g)
    i_lat = torch.randn(N_ITEMS, 4, generator=g)
    u_bias = torch.randn(N_USERS, generator=g)
    i_bias = torch.randn(N_ITEMS, generator=g)
    cat_bias = torch.randn(N_CATS, generator=g)
    cat_bias[0] = 0.0
    n_cats = (cats > 0).sum(1).clamp(min=1)
    z = (dense_raw - dense_raw.mean(0)) / dense_raw.std(0)
    w_dense = torch.tensor([-1.0, 0.3, 0.0, 0.6, 0.0, -0.5])
    logit = (u_bias[user] + i_bias[item] + 0.5 * (u_lat[user] * i_lat[item]).sum(1)
             + 1.5 * cat_bias[cats].sum(1) / n_cats + z @ w_dense - 0.3)
    click = torch.bernoulli(torch.sigmoid(logit), generator=g)
    return user, item, cats, dense_raw, click


class Impressions(Dataset):
    def __init__(self, user, item, cats, dense, click):
        self.user, self.item, self.cats, self.dense, self.click = user, item, cats, dense, click

    def __len__(self):
        return len(self.click)

    def __getitem__(self, idx):
        return self.user[idx], self.item[idx], self.cats[idx], self.dense[idx], self.click[idx]


class WideAndDeep(nn.Module):
    def __init__(self, emb_dim=16, cat_dim=8, hidden=(64, 32)):
        super().__init__()
        self.user_emb = nn.Embedding(N_USERS, emb_dim)
        self.item_emb = nn.Embedding(N_ITEMS, emb_dim)
        self.cat_bag = nn.EmbeddingBag(N_CATS, cat_dim, mode="mean", padding_idx=0)
        self.wide = nn.Linear(N_DENSE, 1)
        self.deep = nn.Sequential(
            nn.Linear(2 * emb_dim + cat_dim + N_DENSE, hidden[0]),
            nn.ReLU(),
            nn.Linear(hidden[0], hidden[1]),
            nn.ReLU(),
            nn.Linear(hidden[1], 1),
        )
        nn.init.normal_(self.user_emb.weight, std=0.1)
        nn.init.normal_(self.item_emb.weight, std=0.1)

    def forward(self, user, item, cats, dense):
        x = torch.cat([self.user_emb(user), self.item_emb(item), self.cat_bag(cats), dense], dim=1)
        return (self.deep(x) + self.wide(dense)).squeeze(1)


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


def main():
    user, item, cats, dense_raw, click = make_impressions(N_SAMPLES)
    mean, std = dense_raw.mean(0), dense_raw.std(0)
    dense = (dense_raw - mean) / std

    loader = DataLoader(Impressions(user, item, cats, dense, click), batch_size=128, shuffle=True,
                        generator=torch.Generator().manual_seed(2))

    model = WideAndDeep()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    criterion = nn.BCEWithLogitsLoss()

    losses = []
    for epoch in range(4):
        for u, i, c, d, y in loader:
            optimizer.zero_grad()
            logits = model(u, i, c, d)
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f}")

    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
