"""Tabular classifier: categorical embeddings + standardised numeric columns -> MLP.

Synthetic "customer segment" data: 3 categorical columns, 5 numeric columns on very
different scales, an imbalanced 4-class target. Class-weighted cross entropy,
SGD with Nesterov momentum and a linear warmup.
"""
import math

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
N_ROWS = 6000
BATCH_SIZE = 128
EPOCHS = 5
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
WARMUP_STEPS = 20
EMB_DIM = 8
HIDDEN = 128
DROPOUT = 0.1
N_CLASSES = 4

CAT_COLUMNS = ["region", "device", "plan"]
NUM_COLUMNS = ["age", "income", "tenure_days", "sessions", "avg_basket"]


def make_raw_data(n, rng):
    """Raw columns as they come out of a CSV: category codes are arbitrary ints."""
    region_codes = rng.choice(np.arange(100, 124), size=24, replace=False)  # 24 regions
    device_codes = np.array([3, 7, 11, 19, 23, 42])                       # 6 devices
    plan_codes = np.array([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])       # 10 plans

    region = rng.choice(region_codes, size=n)
    device = rng.choice(device_codes, size=n, p=[0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    plan = rng.choice(plan_codes, size=n)

    age = rng.normal(40, 12, n).clip(18, 90)
    income = rng.lognormal(10.5, 0.5, n)
    tenure = rng.exponential(400, n)
    sessions = rng.poisson(12, n).astype(np.float64)
    basket = rng.gamma(2.0, 30.0, n)

    # hidden ground truth: per-category effects + nonlinear numeric effects
    eff_region = {c: rng.normal(0, 1.0, N_CLASSES) for c in region_codes}
    eff_device = {c: rng.normal(0, 1.0, N_CLASSES) for c in device_codes}
    eff_plan = {c: rng.normal(0, 1.5, N_CLASSES) for c in plan_codes}
    z_age = (age - 40) / 12
    z_inc = (np.log(income) - 10.5) / 0.5
    z_ten = np.log1p(tenure) - 5.5
    logits = np.stack([
        np.zeros(n),
        1.2 * z_inc - 0.8 * z_age,
        1.5 * np.tanh(z_ten) + 0.05 * (sessions - 12),
        2.0 * (z_age ** 2 - 1) - 0.02 * (basket - 60),
    ], axis=1)
    logits += np.stack([eff_region[c] for c in region])
    logits += np.stack([eff_device[c] for c in device])
    logits += np.stack([eff_plan[c] for c in plan])
    logits *= 1.5
    logits += np.log([0.55, 0.25, 0.13, 0.07])  # class imbalance
    g = rng.gumbel(size=logits.shape) * 0.5
    target = np.argmax(logits + g, axis=1)

    cats = np.stack([region, device, plan], axis=1)
    nums = np.stack([age, income, tenure, sessions, basket], axis=1)
    return cats, nums, target


def preprocess(cats, nums, target, train_frac=0.8, seed=0):
    """numpy-only preprocessing: encode categories, standardise numerics, split."""
    rng = np.random.default_rng(seed)
    n = len(target)

    cat_idx = np.empty_like(cats)
    cardinalities = []
    for j in range(cats.shape[1]):
        uniq, inv = np.unique(cats[:, j], return_inverse=True)
        cat_idx[:, j] = inv
        cardinalities.append(len(uniq))

    nums = nums.copy()
    nums[:, 1] = np.log(nums[:, 1])      # income is log-normal
    nums[:, 2] = np.log1p(nums[:, 2])    # tenure is heavy tailed

    perm = rng.permutation(n)
    cat_idx, nums, target = cat_idx[perm], nums[perm], target[perm]

    n_train = int(train_frac * n)
    mean = nums[:n_train].mean(axis=0)
    std = nums[:n_train].std(axis=0) + 1e-8
    nums = (nums - mean) / std

    split = {
        "train": (cat_idx[:n_train], nums[:n_train], target[:n_train]),
        "valid": (cat_idx[n_train:], nums[n_train:], target[n_train:]),
    }
    return split, cardinalities


class TabularNet(nn.Module):
    def __init__(self, cardinalities, n_numeric, n_classes, emb_dim=8, hidden=128, dropout=0.1):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(card, emb_dim) for card in cardinalities])
        in_dim = emb_dim * len(cardinalities) + n_numeric
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2),
            nn.BatchNorm1d(hidden // 2),
            nn.ReLU(),
            nn.Dropout(dropout),
        )
        self.head = nn.Sequential(nn.Linear(hidden // 2, n_classes), nn.Softmax(dim=1))
        self._init_weights()

    def _init_weights(self):
        for emb in self.embeddings:
            nn.init.normal_(emb.weight, mean=0.0, std=0.1)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x_cat, x_num):
        embs = [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        x = torch.cat(embs + [x_num], dim=1)
        return self.head(self.mlp(x))


def class_weights(y, n_classes):
    counts = np.bincount(y, minlength=n_classes).astype(np.float64)
    w = counts.sum() / (n_classes * counts)
    return torch.tensor(w, dtype=torch.float32)


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    cats, nums, target = make_raw_data(N_ROWS, rng)
    split, cardinalities = preprocess(cats, nums, target, seed=SEED)

    xc, xn, y = split["train"]
    train_ds = TensorDataset(torch.as_tensor(xc, dtype=torch.long),
                             torch.as_tensor(xn, dtype=torch.float32),
                             torch.as_tensor(y, dtype=torch.long))
    loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True)

    model = TabularNet(cardinalities, len(NUM_COLUMNS), N_CLASSES,
                       emb_dim=EMB_DIM, hidden=HIDDEN, dropout=DROPOUT)
    criterion = nn.CrossEntropyLoss(weight=class_weights(y, N_CLASSES))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM,
                                nesterov=True, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda=lambda step: min(1.0, (step + 1) / WARMUP_STEPS))

    losses = []
    model.train()
    for epoch in range(EPOCHS):
        for x_cat, x_num, yb in loader:
            optimizer.zero_grad()
            logits = model(x_cat, x_num)
            loss = criterion(logits, yb)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {np.mean(losses[-len(loader):]):.4f}")

    model.eval()
    with torch.no_grad():
        vc, vn, vy = split["valid"]
        pred = model(torch.as_tensor(vc, dtype=torch.long),
                     torch.as_tensor(vn, dtype=torch.float32)).argmax(1).numpy()
    print(f"valid accuracy {(pred == vy).mean():.3f}  (majority {np.bincount(vy).max() / len(vy):.3f})")

    init, final = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {len(losses)}")


if __name__ == "__main__":
    main()
