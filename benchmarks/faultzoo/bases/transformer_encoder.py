"""Small transformer encoder classifier with hand-written multi-head attention.

Family: transformer encoder (token + learned position embeddings, 2 pre-norm
blocks with q/k/v linear projections and a softmax over scaled dot products,
GELU MLP, LayerNorm), classified from the [CLS] position, 3-class CrossEntropyLoss, AdamW,
CosineAnnealingLR stepped every batch.
Style: several nn.Module classes, a Dataset subclass and a DataLoader,
hyperparameters as module-level constants.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

VOCAB, SEQ, D_MODEL, HEADS, LAYERS, CLASSES = 24, 14, 32, 2, 2, 3
EPOCHS, BATCH, LR = 6, 32, 2e-3  # zoo: lr value=2e-3


class MajorityDataset(Dataset):
    """Token 0 is [CLS]; the label is the marker token (1-3) that occurs most often among filler tokens."""

    def __init__(self, n, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, CLASSES, (n,), generator=g)
        self.x = torch.randint(CLASSES + 1, VOCAB, (n, SEQ), generator=g)
        for i in range(n):
            others = [c for c in range(CLASSES) if c != self.y[i]]
            markers = [int(self.y[i])] * 4 + others * 2
            slots = torch.randperm(SEQ - 1, generator=g)[:len(markers)] + 1
            self.x[i, slots] = torch.tensor(markers) + 1
        self.x[:, 0] = 0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.d_head = heads, d // heads
        self.q = nn.Linear(d, d)  # zoo: layer name=blocks.0.attn.q
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.heads, self.d_head).transpose(1, 2)
        k = self.k(x).view(B, T, self.heads, self.d_head).transpose(1, 2)
        v = self.v(x).view(B, T, self.heads, self.d_head).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # zoo: attn_scores var=scores
        weights = scores.softmax(dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(B, T, -1))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(0.1)  # zoo: dropout modules=blocks.0.drop,blocks.1.drop

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)  # zoo: layer name=tok first=1 init=1 frozen=1
        self.pos = nn.Parameter(0.1 * torch.randn(1, SEQ, D_MODEL))
        self.blocks = nn.ModuleList([Block(D_MODEL, HEADS) for _ in range(LAYERS)])  # zoo: layer name=blocks.1.mlp.0 init=1 missing=1
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, CLASSES)  # zoo: layer name=head head=1 missing=1 new="nn.Linear(D_MODEL, CLASSES)"

    def forward(self, tokens):
        h = self.tok(tokens) + self.pos  # zoo: cut var=h upstream=tok
        for block in self.blocks:
            h = block(h)
        h = self.norm(h)[:, 0]  # zoo: cut var=h upstream=tok,blocks,blocks.0,blocks.1,norm
        return self.head(h)  # zoo: logits


torch.manual_seed(0)
loader = DataLoader(MajorityDataset(512), batch_size=BATCH, shuffle=True)
model = Encoder()  # zoo: model var=model attn=blocks.0.attn,blocks.1.attn q=blocks.0.attn.q,blocks.1.attn.q k=blocks.0.attn.k,blocks.1.attn.k
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)  # zoo: optimizer var=optimizer kind=adamw
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * len(loader))  # zoo: sched var=scheduler per=batch

for epoch in range(EPOCHS):  # zoo: loop
    model.train()  # zoo: train_mode
    for tokens, labels in loader:
        logits = model(tokens)  # zoo: forward
        loss = F.cross_entropy(logits, labels)  # zoo: loss kind=ce pred=logits target=labels classes=CLASSES fn=1
        optimizer.zero_grad()  # zoo: zero_grad
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        scheduler.step()  # zoo: sched_step per=batch
    print(f"epoch {epoch}: last loss {loss.item():.4f}")
