"""An accelerate loop with gradient accumulation and clipping; prints the mean loss of each optimizer step."""
import json

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
accelerator = Accelerator(gradient_accumulation_steps=4, cpu=True)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
X = torch.randn(640, 8)
loader = DataLoader(TensorDataset(X, X.sum(1, keepdim=True)), batch_size=16)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
means, micro = [], []
for x, y in loader:
    with accelerator.accumulate(model):
        loss = nn.functional.mse_loss(model(x), y)
        micro.append(loss.item())
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if accelerator.sync_gradients:
            means.append(sum(micro) / len(micro))
            micro = []
print(json.dumps(means))
