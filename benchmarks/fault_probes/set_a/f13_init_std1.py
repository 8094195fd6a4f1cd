# Tabular regression: predict a synthetic "energy use" target from 8 mixed-scale features.
import numpy as np
import torch
import torch.nn as nn

np.random.seed(0)
torch.manual_seed(0)

N = 2048
age = np.random.uniform(18, 80, N)                 # years
income = np.random.lognormal(10.5, 0.5, N)         # currency, ~40k
area = np.random.normal(120, 35, N).clip(20, None)  # m^2
rooms = np.random.randint(1, 8, N).astype(float)
temp = np.random.normal(12, 6, N)                  # deg C
dist = np.random.exponential(15, N)                # km, missing for some rows
occupants = np.random.poisson(2.5, N).astype(float)
insulation = np.random.uniform(0, 1, N)

X_raw = np.stack([age, income, area, rooms, temp, dist, occupants, insulation], axis=1)
y_raw = (
    0.02 * area * (1.2 - insulation)
    + 0.4 * occupants
    - 0.08 * temp
    + 0.3 * np.log(income / 30000.0)
    + 0.5 * np.sin(age / 10.0)
    + 0.05 * rooms * occupants
    + 0.01 * dist
    + np.random.normal(0, 0.25, N)
)

X_raw[np.random.rand(N) < 0.03, 5] = np.nan       # distance not recorded

mean = np.nanmean(X_raw, axis=0)
std = np.nanstd(X_raw, axis=0)
X = (X_raw - mean) / std
X = np.nan_to_num(X, nan=0.0)                      # missing -> column mean
y = (y_raw - y_raw.mean()) / y_raw.std()

X_t = torch.tensor(X, dtype=torch.float32)
y_t = torch.tensor(y, dtype=torch.float32).unsqueeze(1)

model = nn.Sequential(
    nn.Linear(8, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 32),
    nn.ReLU(),
    nn.Linear(32, 1),
)

for m in model:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=1.0)
        nn.init.zeros_(m.bias)

optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
loss_fn = nn.MSELoss()

batch_size = 64
epochs = 8
losses = []
for epoch in range(epochs):
    perm = torch.randperm(N)
    for i in range(0, N, batch_size):
        idx = perm[i:i + batch_size]
        xb, yb = X_t[idx], y_t[idx]
        pred = model(xb)
        loss = loss_fn(pred, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(f"epoch {epoch}  mse {np.mean(losses[-32:]):.4f}")

first = float(np.mean(losses[:5]))
last = float(np.mean(losses[-5:]))
fmt = lambda v: f"{v:.4f}" if np.isfinite(v) else "nan"
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
