import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

NUM_CLASSES = 4
IMG = 16
PATCH = 4
DIM = 64
HEADS = 4
DEPTH = 2
DROPOUT = 0.9
STEPS = 250
BASE_LR = 3e-3
BATCH = 64


def make_data(n, g):
    # 8-bit RGB images: a red and a green patch on a noisy grey background;
    # the class is the quadrant the red patch is in
    img = 90.0 + 25.0 * torch.randn(n, 3, IMG, IMG, generator=g)
    y = torch.empty(n, dtype=torch.long)
    grid = IMG // PATCH
    for i in range(n):
        while True:
            r1, c1, r2, c2 = torch.randint(0, grid, (4,), generator=g).tolist()
            if (r1, c1) != (r2, c2):
                break
        img[i, 0, r1 * PATCH:(r1 + 1) * PATCH, c1 * PATCH:(c1 + 1) * PATCH] += 120
        img[i, 1, r2 * PATCH:(r2 + 1) * PATCH, c2 * PATCH:(c2 + 1) * PATCH] += 120
        y[i] = 2 * int(r1 >= grid // 2) + int(c1 >= grid // 2)
    return img.clamp(0, 255).to(torch.uint8), y


MEAN = torch.tensor([0.4, 0.4, 0.35]).view(1, 3, 1, 1)
STD = torch.tensor([0.15, 0.15, 0.1]).view(1, 3, 1, 1)


def preprocess(images):
    return (images.float() / 255.0 - MEAN) / STD


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=2, drop=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, dim * mlp_ratio),
            nn.GELU(),
            nn.Dropout(drop),
            nn.Linear(dim * mlp_ratio, dim),
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class TinyViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, kernel_size=PATCH, stride=PATCH)
        num_patches = (IMG // PATCH) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, DIM) * 0.1)
        self.blocks = nn.ModuleList([Block(DIM, HEADS, drop=DROPOUT) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, NUM_CLASSES)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return self.head(x[:, 0])


g = torch.Generator().manual_seed(1)
train_x, train_y = make_data(2048, g)

model = TinyViT()
optimizer = torch.optim.AdamW(model.parameters(), lr=BASE_LR, weight_decay=0.05)
WARMUP = 20


def lr_lambda(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, STEPS - WARMUP)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
criterion = nn.CrossEntropyLoss()

losses = []
for step in range(STEPS):
    idx = torch.randint(0, train_x.shape[0], (BATCH,), generator=g)
    xb, yb = preprocess(train_x[idx]), train_y[idx]
    logits = model(xb)
    loss = criterion(logits, yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
