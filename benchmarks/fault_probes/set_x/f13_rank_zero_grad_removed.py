"""Listwise learning to rank: query-document scoring MLP trained with ListNet (top-1) loss."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
N_QUERIES = 1500
LIST_SIZE = 10
N_DOMAINS = 40
BATCH = 32
EPOCHS = 6
LR = 1e-2
WEIGHT_DECAY = 1e-2
HIDDEN = 64
TRAIN_FRAC = 0.8


def make_lists(n_queries, rng):
    """LETOR-like lists: 12 query-document features, a domain id, graded relevance 0-4."""
    shape = (n_queries, LIST_SIZE)
    bm25 = rng.gamma(2.0, 4.0, shape)
    tfidf = bm25 * rng.uniform(0.05, 0.15, shape) + rng.gamma(1.0, 0.3, shape)
    title_hit = rng.binomial(1, 0.3, shape).astype(float)
    doc_len = rng.lognormal(6.5, 0.7, shape)
    url_depth = rng.integers(1, 8, shape).astype(float)
    pagerank = rng.lognormal(0.0, 1.0, shape)
    inlinks = rng.poisson(pagerank * 20)
    clicks = rng.poisson(3 + 2 * title_hit + 0.3 * bm25)
    dwell = rng.gamma(2.0, 15.0, shape)
    age_days = rng.exponential(300, shape)
    spam = rng.beta(1.0, 8.0, shape)
    noise = rng.normal(0, 1, shape)
    x = np.stack([bm25, tfidf, title_hit, doc_len, url_depth, pagerank, inlinks, clicks,
                  dwell, age_days, spam, noise], -1)
    domain = rng.integers(0, N_DOMAINS, shape)
    domain_quality = rng.normal(0, 1.0, N_DOMAINS)

    latent = (0.9 * np.log1p(bm25) + 0.8 * title_hit + 0.5 * np.log(pagerank)
              - 0.25 * np.abs(np.log(doc_len) - 6.5) - 0.15 * url_depth
              + 0.6 * np.tanh((dwell - 30) / 20) - 4.0 * spam - 0.4 * np.log1p(age_days / 100)
              + 1.2 * domain_quality[domain] + rng.normal(0, 0.3, shape))
    centred = latent - latent.mean(1, keepdims=True)
    grades = np.digitize(centred, [-0.3, 0.4, 1.0, 1.6]).astype(np.float32)
    return x.astype(np.float32), domain, grades


def query_level_norm(x, eps=1e-6):
    """Standardise every feature within its query's list (LETOR QueryLevelNorm)."""
    mean = x.mean(axis=1, keepdims=True)
    std = x.std(axis=1, keepdims=True)
    return (x - mean) / (std + eps)


class Scorer(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_features, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, 1)
        self.domain_bias = nn.Embedding(N_DOMAINS, 1)
        nn.init.zeros_(self.domain_bias.weight)

    def forward(self, x, domain):
        """x (B, L, F), domain (B, L) -> scores (B, L)."""
        return self.head(self.encoder(x)).squeeze(-1) + self.domain_bias(domain).squeeze(-1)


def listnet_loss(scores, relevance):
    """Cross-entropy between the top-1 distributions of the labels and of the scores."""
    target = F.softmax(relevance, dim=1)
    return -(target * F.log_softmax(scores, dim=1)).sum(dim=1).mean()


def ndcg_at_k(scores, relevance, k=LIST_SIZE):
    gains = 2.0 ** relevance - 1
    discounts = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float32))
    order = scores.argsort(dim=1, descending=True)[:, :k]
    dcg = (gains.gather(1, order) * discounts).sum(1)
    ideal = (gains.sort(dim=1, descending=True).values[:, :k] * discounts).sum(1)
    return (dcg / ideal.clamp(min=1e-9)).mean().item()


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x, domain, grades = make_lists(N_QUERIES, rng)
    x = query_level_norm(x)
    split = int(TRAIN_FRAC * N_QUERIES)

    x, domain, grades = torch.from_numpy(x), torch.from_numpy(domain), torch.from_numpy(grades)
    loader = DataLoader(TensorDataset(x[:split], domain[:split], grades[:split]),
                        batch_size=BATCH, shuffle=True, drop_last=True)
    x_va, d_va, y_va = x[split:], domain[split:], grades[split:]

    model = Scorer(x.shape[-1], HIDDEN)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "domain" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "domain" in n]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=LR)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    losses = []
    for epoch in range(EPOCHS):
        model.train()
        for xb, db, yb in loader:
            loss = listnet_loss(model(xb, db), yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        model.eval()
        with torch.no_grad():
            s_va = model(x_va, d_va)
            val = listnet_loss(s_va, y_va).item()
        print(f"epoch {epoch} train {np.mean(losses[-len(loader):]):.4f} val {val:.4f} "
              f"ndcg@10 {ndcg_at_k(s_va, y_va):.4f} lr {scheduler.get_last_lr()[0]:.1e}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
