import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset, DataLoader

torch.manual_seed(0)
rng = np.random.default_rng(0)

N, D, C = 2048, 20, 4
X = rng.normal(size=(N, D))
W_cls = rng.normal(size=(D, C))
y_cls = np.argmax(X @ W_cls + 0.3 * rng.normal(size=(N, C)), axis=1)
w_reg = rng.normal(size=(D,)) / np.sqrt(D)
y_reg = np.tanh(X @ w_reg) + 0.1 * rng.normal(size=(N,))

X_t = torch.from_numpy(X).float()
yc_t = torch.from_numpy(y_cls).long()
yr_t = torch.from_numpy(y_reg).float()

dataset = TensorDataset(X_t, yc_t, yr_t)
loader = DataLoader(dataset, batch_size=64, shuffle=True)


class MultiTaskNet(nn.Module):
    def __init__(self, d_in, hidden, n_classes):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Linear(d_in, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
        )
        self.cls_head = nn.Linear(hidden, n_classes)
        self.reg_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls_head(h), self.reg_head(h).squeeze(-1)


model = MultiTaskNet(D, 64, C)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
ce = nn.CrossEntropyLoss()
mse = nn.MSELoss()


def train(model, loader, epochs):
    losses = []
    model.train()
    for epoch in range(epochs):
        for xb, yc, yr in loader:
            logits, reg = model(xb)
            loss = ce(logits, yc) + 0.5 * mse(reg, yr)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            losses.append(loss.item())
    return losses


losses = train(model, loader, epochs=7)


def fmt(v):
    return f"{v:.4f}" if np.isfinite(v) else "nan"


print(f"initial loss {fmt(float(np.mean(losses[:5])))} final loss {fmt(float(np.mean(losses[-5:])))} steps {len(losses)}")
