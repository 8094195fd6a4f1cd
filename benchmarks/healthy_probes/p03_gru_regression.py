"""Healthy probe 3: GRU sequence regression (predict next value of noisy sines), Adam + clip_grad_norm_."""
import math

import torch
import torch.nn as nn

torch.manual_seed(42)
SEQ_LEN, BATCH, HIDDEN = 30, 32, 48


def make_batch(g):
    freq = 0.1 + 0.3 * torch.rand(BATCH, 1, generator=g)
    phase = 2 * math.pi * torch.rand(BATCH, 1, generator=g)
    t = torch.arange(SEQ_LEN + 1).float().unsqueeze(0)
    s = torch.sin(freq * t + phase) + 0.05 * torch.randn(BATCH, SEQ_LEN + 1, generator=g)
    return s[:, :-1].unsqueeze(-1), s[:, 1:].unsqueeze(-1)


class SeqRegressor(nn.Module):
    def __init__(self, hidden=HIDDEN, num_layers=2):
        super().__init__()
        self.rnn = nn.GRU(1, hidden, num_layers=num_layers, batch_first=True, dropout=0.1)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, h0=None):
        out, h = self.rnn(x, h0)
        return self.head(out), h


model = SeqRegressor()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.MSELoss()
g = torch.Generator().manual_seed(42)
losses = []
for step in range(200):
    x, y = make_batch(g)
    model.train()
    pred, _ = model(x)
    loss = criterion(pred, y)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    losses.append(loss.item())
    if step % 50 == 0:
        print(f"step {step:4d} mse {loss.item():.5f}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
