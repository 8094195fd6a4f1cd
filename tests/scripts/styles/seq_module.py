"""Tutorial style: the model is a module-level nn.Sequential; one unnormalised batch at step 20."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(16, 64),
    nn.ReLU(),
    nn.Linear(64, 32),
    nn.ReLU(),
    nn.Linear(32, 1),
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
w = torch.randn(16, 1)

for step in range(40):
    x = torch.randn(32, 16)
    y = x @ w
    if step == 20:
        x = x * 1e3  # a batch nobody normalised
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
