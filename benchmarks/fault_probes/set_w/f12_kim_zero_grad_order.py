"""Kim-style 1-D CNN text classifier (4 topics) with a "pretrained" embedding table.

Sentences are filler words plus two keywords of their topic; they also carry a
keyword of another topic preceded by the word "not", so the bigram matters.
The pretrained matrix places every topic's keywords around a topic direction,
as word vectors trained on a large corpus would; it is fine-tuned here.
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
VOCAB = 2000
EMB_DIM = 32
N_CLASSES = 4
KEYWORDS_PER_CLASS = 25
MAX_LEN = 40
N_TRAIN = 4000
BATCH = 50
EPOCHS = 3
LR = 1e-3
PAD, NOT = 0, 1

random.seed(SEED)
torch.manual_seed(SEED)

# vocabulary layout: 0 pad, 1 "not", then the keywords of each topic, then filler words
keywords = [
    list(range(2 + c * KEYWORDS_PER_CLASS, 2 + (c + 1) * KEYWORDS_PER_CLASS)) for c in range(N_CLASSES)
]
first_filler = 2 + N_CLASSES * KEYWORDS_PER_CLASS
fillers = list(range(first_filler, VOCAB))

# "pretrained" word vectors: topic directions plus noise, generic words random
g = torch.Generator().manual_seed(1)
topic_dirs = torch.randn(N_CLASSES, EMB_DIM, generator=g)
pretrained = 0.5 * torch.randn(VOCAB, EMB_DIM, generator=g)
for c in range(N_CLASSES):
    for w in keywords[c]:
        pretrained[w] += topic_dirs[c]
pretrained[PAD] = 0.0


def make_sentence(label):
    length = random.randint(12, MAX_LEN)
    words = [random.choice(fillers) for _ in range(length)]
    other = random.choice([c for c in range(N_CLASSES) if c != label])
    slots = random.sample(range(1, length - 1), 3)
    words[slots[0]] = random.choice(keywords[label])
    words[slots[1]] = random.choice(keywords[label])
    words[slots[2]] = random.choice(keywords[other])
    words[slots[2] - 1] = NOT
    # a keyword must not be negated by accident
    for s in slots[:2]:
        if words[s - 1] == NOT:
            words[s - 1] = random.choice(fillers)
    return words


def make_dataset(n):
    x = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    y = torch.randint(0, N_CLASSES, (n,))
    for i in range(n):
        s = make_sentence(int(y[i]))
        x[i, : len(s)] = torch.tensor(s)
    return x, y


class KimCNN(nn.Module):
    def __init__(self, embeddings, widths=(2, 3, 4), n_filters=32, n_classes=N_CLASSES, freeze=False):
        super().__init__()
        self.embedding = nn.Embedding.from_pretrained(embeddings, freeze=freeze, padding_idx=PAD)
        self.convs = nn.ModuleList([nn.Conv1d(embeddings.size(1), n_filters, w) for w in widths])
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(n_filters * len(widths), n_classes)

    def forward(self, x):
        e = self.embedding(x)            # (B, L, E)
        e = e.transpose(1, 2)            # (B, E, L) for Conv1d
        pooled = [F.relu(conv(e)).max(dim=2).values for conv in self.convs]
        h = torch.cat(pooled, dim=1)
        return self.fc(self.dropout(h))


x_train, y_train = make_dataset(N_TRAIN)
loader = DataLoader(TensorDataset(x_train, y_train), batch_size=BATCH, shuffle=True)

model = KimCNN(pretrained)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=LR)

losses = []
model.train()
for epoch in range(EPOCHS):
    for xb, yb in loader:
        logits = model(xb)
        loss = criterion(logits, yb)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
        losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
