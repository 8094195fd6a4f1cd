import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)

N_TRAIN = 4096
N_CLASSES = 3
CARDINALITIES = [4, 7, 3]
# numeric columns in their raw units: very different scales and offsets
SCALES = torch.tensor([0.002, 1.0, 40.0, 800.0, 15000.0, 0.3])
OFFSETS = torch.tensor([0.01, -3.0, 200.0, 5000.0, 60000.0, 1.5])


def make_table(n, gen):
    z = torch.randn(n, len(SCALES), generator=gen)
    cats = torch.stack([torch.randint(0, c, (n,), generator=gen) for c in CARDINALITIES], dim=1)
    w = torch.tensor([[1.5, -1.0, 0.0], [0.0, 1.2, -1.2], [-1.0, 0.0, 1.0],
                      [0.8, 0.8, -1.6], [-1.3, 1.0, 0.3], [0.0, -0.7, 0.7]])
    cat_effect = [torch.tensor([1.0, -1.0, 0.0, 0.5]),
                  torch.tensor([0.0, 1.0, -1.0, 0.3, -0.5, 0.8, -0.8]),
                  torch.tensor([-0.6, 0.0, 0.6])]
    logits = z @ w
    for j, eff in enumerate(cat_effect):
        logits[:, j % N_CLASSES] += 1.5 * eff[cats[:, j]]
    logits[:, 0] += 1.2 * z[:, 0] * z[:, 3]
    y = torch.distributions.Categorical(logits=2.0 * logits).sample()
    return z * SCALES + OFFSETS, cats, y


class NumericTokenizer(nn.Module):
    def __init__(self, n_features, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_features, d) / math.sqrt(d))
        self.bias = nn.Parameter(torch.randn(n_features, d) / math.sqrt(d))

    def forward(self, x):
        return x.unsqueeze(-1) * self.weight + self.bias


class FTTransformer(nn.Module):
    def __init__(self, n_num, cardinalities, d=32, n_heads=4, n_layers=2, n_classes=3, dropout=0.1):
        super().__init__()
        self.num_tokenizer = NumericTokenizer(n_num, d)
        self.cat_embeddings = nn.ModuleList([nn.Embedding(c, d) for c in cardinalities])
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, n_heads, dim_feedforward=2 * d, dropout=dropout,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, n_classes))

    def forward(self, x_num, x_cat):
        num_tokens = self.num_tokenizer(x_num)
        cat_tokens = torch.stack([emb(x_cat[:, j]) for j, emb in enumerate(self.cat_embeddings)], dim=1)
        cls = self.cls.expand(x_num.shape[0], -1, -1)
        tokens = torch.cat([cls, num_tokens, cat_tokens], dim=1)
        h = self.encoder(tokens)
        return self.head(h[:, 0])


gen = torch.Generator().manual_seed(1)
x_num, x_cat, y = make_table(N_TRAIN, gen)
num_mean, num_std = x_num.mean(dim=0), x_num.std(dim=0)
x_num = (x_num - num_mean) / num_std

loader = DataLoader(TensorDataset(x_num, x_cat, y), batch_size=128, shuffle=True, drop_last=True)

model = FTTransformer(n_num=x_num.shape[1], cardinalities=CARDINALITIES, n_classes=N_CLASSES)
criterion = nn.CrossEntropyLoss()

EPOCHS = 6
total_steps = EPOCHS
warmup_steps = 20
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)


def lr_lambda(step):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

losses = []
model.train()
for epoch in range(EPOCHS):
    for xb_num, xb_cat, yb in loader:
        logits = model(xb_num, xb_cat)
        loss = criterion(logits, yb)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())


def fmt(v):
    m = sum(v) / len(v)
    return f"{m:.4f}" if math.isfinite(m) else "nan"


print(f"initial loss {fmt(losses[:5])} final loss {fmt(losses[-5:])} steps {len(losses)}")
