import math
import torch
import torch.nn as nn

torch.manual_seed(0)

# synthetic 3x16x16 images: class = which quadrant carries a bright colored blob
N, C = 1024, 4
g = torch.Generator().manual_seed(0)
labels = torch.randint(0, C, (N,), generator=g)
images = 0.5 * torch.randn(N, 3, 16, 16, generator=g)
for i in range(N):
    k = labels[i].item()
    r, c = (k // 2) * 8, (k % 2) * 8
    images[i, k % 3, r + 2:r + 6, c + 2:c + 6] += 1.5
images = (images - images.mean(dim=(0, 2, 3), keepdim=True)) / images.std(dim=(0, 2, 3), keepdim=True)


class MixerBlock(nn.Module):
    def __init__(self, n_tokens, dim, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(
            nn.Linear(n_tokens, token_hidden), nn.Sigmoid(), nn.Linear(token_hidden, n_tokens)
        )
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(
            nn.Linear(dim, channel_hidden), nn.Sigmoid(), nn.Linear(channel_hidden, dim)
        )

    def forward(self, x):  # x: [B, T, D]
        y = self.norm1(x).transpose(1, 2)
        x = x + self.token_mlp(y).transpose(1, 2)
        x = x + self.channel_mlp(self.norm2(x))
        return x


class Mixer(nn.Module):
    def __init__(self, patch=4, dim=64, depth=4, n_classes=C):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        n_tokens = (16 // patch) ** 2
        self.blocks = nn.ModuleList(
            [MixerBlock(n_tokens, dim, 32, 96) for _ in range(depth)]
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x).mean(dim=1)
        return self.head(x)


model = Mixer()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)

batch_size = 64
losses = []
for epoch in range(8):
    perm = torch.randperm(N)
    for i in range(0, N, batch_size):
        idx = perm[i:i + batch_size]
        xb, yb = images[idx], labels[idx]
        optimizer.zero_grad()
        out = model(xb)
        loss = criterion(out, yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
