import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

D, C, N = 32, 10, 4000
protos = torch.randn(C, D)
labels_all = torch.randint(0, C, (N,))
feats = protos[labels_all] + 0.5 * torch.randn(N, D)


def augment(x):
    return x + 0.3 * torch.randn_like(x)


class Encoder(nn.Module):
    def __init__(self, d=D, h=128, e=32):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU())
        self.proj = nn.Linear(h, e)

    def forward(self, x):
        return self.proj(self.backbone(x))


def info_nce(z1, z2, temperature=0.1):
    z1 = F.normalize(z1, dim=1)
    z2 = F.normalize(z2, dim=1)
    logits = z1 @ z2.t() / temperature
    targets = torch.arange(z1.shape[0])
    return F.cross_entropy(logits, targets)


model = Encoder()
steps = 200
opt = torch.optim.SGD(model.parameters(), lr=5.0, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)

losses = []
bs = 128
for step in range(steps):
    idx = torch.randint(0, N, (bs,))
    x = feats[idx]
    z1 = model(augment(x))
    z2 = model(augment(x))
    loss = info_nce(z1, z2)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if v != v or v in (float("inf"), float("-inf")) else f"{v:.4f}"


ini = sum(losses[:5]) / 5
fin = sum(losses[-5:]) / 5
print(f"initial loss {fmt(ini)} final loss {fmt(fin)} steps {steps}")
