"""Healthy probe 10: transfer learning with an intentionally frozen "pretrained" backbone.

Stage 1 pretrains a small CNN on a source task; stage 2 freezes conv1/conv2 (requires_grad=False,
BatchNorm in eval), replaces the head and fine-tunes only the trainable parameters on a new task.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(21)
g = torch.Generator().manual_seed(21)
protos = torch.randn(12, 1, 16, 16, generator=g)


def make_batch(classes, bs=32):
    idx = torch.randint(0, len(classes), (bs,), generator=g)
    x = protos[torch.tensor(classes)[idx]] + 0.8 * torch.randn(bs, 1, 16, 16, generator=g)
    return x, idx


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.conv3(x))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


class Classifier(nn.Module):
    def __init__(self, n_cls):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Linear(32, n_cls)

    def forward(self, x):
        return self.head(self.backbone(x))


# ---- stage 1: "pretraining" on source classes 0..7 (short) ----
model = Classifier(8)
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
for _ in range(60):
    x, y = make_batch(list(range(8)))
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"pretrain done, loss {loss.item():.4f}")
state = model.backbone.state_dict()

# ---- stage 2: fine-tune on target classes 8..11 with frozen lower layers ----
model = Classifier(4)
model.backbone.load_state_dict(state)
for name, p in model.backbone.named_parameters():
    if name.startswith(("conv1", "bn1", "conv2", "bn2")):
        p.requires_grad = False
trainable = [p for p in model.parameters() if p.requires_grad]
n_train = sum(p.numel() for p in trainable)
n_all = sum(p.numel() for p in model.parameters())
print(f"trainable params {n_train}/{n_all}")
optimizer = torch.optim.SGD(trainable, lr=0.01, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=150)
target = [8, 9, 10, 11]
losses = []
for step in range(150):
    model.train()
    model.backbone.bn1.eval()  # keep frozen BN statistics fixed
    model.backbone.bn2.eval()
    x, y = make_batch(target)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
    if step % 30 == 0:
        print(f"finetune step {step} loss {loss.item():.4f}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
