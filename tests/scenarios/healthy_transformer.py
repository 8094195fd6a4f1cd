"""Healthy: the demo's transformer with a correct optimizer (AdamW, no decay on embeddings)."""
import torch
from torch import nn
from gradsight.demo.model import TinyTransformer, batches

EXPECTED = None

torch.manual_seed(0)
model = TinyTransformer()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
criterion = nn.CrossEntropyLoss()
data = batches(0)
for step in range(120):
    tokens, targets = next(data)
    optimizer.zero_grad()
    logits = model(tokens)
    loss = criterion(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    optimizer.step()
