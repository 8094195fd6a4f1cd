"""Healthy probe 9: MLP regression/classification trained under torch.autocast("cpu", dtype=torch.bfloat16), fp32 master weights."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(5)
IN, HID, OUT = 32, 128, 8
g = torch.Generator().manual_seed(5)
W_true = torch.randn(IN, OUT, generator=g)


def make_batch(bs=128):
    x = torch.randn(bs, IN, generator=g)
    y = (torch.tanh(x @ W_true) + 0.3 * torch.sin(2 * x[:, :OUT])).argmax(-1)
    return x, y


model = nn.Sequential(
    nn.Linear(IN, HID), nn.SiLU(),
    nn.Linear(HID, HID), nn.SiLU(),
    nn.Linear(HID, HID), nn.SiLU(),
    nn.Linear(HID, OUT),
)
assert all(p.dtype == torch.float32 for p in model.parameters())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
losses = []
for step in range(250):
    x, y = make_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)           # bf16 matmuls
        loss = F.cross_entropy(logits, y)  # autocast runs this in fp32
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f} logits dtype {logits.dtype}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
