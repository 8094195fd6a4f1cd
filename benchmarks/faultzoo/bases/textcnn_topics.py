"""TextCNN topic classifier (Kim 2014 style) on synthetic token sequences.

Family: convolutional text model (nn.Embedding, three nn.Conv1d of widths 2-4
in a ModuleList, ReLU, max-over-time pooling, dropout, linear head), 4-class
CrossEntropyLoss, Adam, ExponentialLR per epoch.
Style: a config namespace (types.SimpleNamespace), a `TextCNN` class whose
forward loops over its convolutions, batches from a shuffled DataLoader,
a `run()` function returning the history of epoch losses.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

cfg = SimpleNamespace(vocab=60, seq=20, emb=24, filters=16, classes=4, batch=32, epochs=5, lr=3e-3, seed=0)  # zoo: lr value=3e-3


class TextCNN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embedding = nn.Embedding(c.vocab, c.emb)  # zoo: layer name=embedding first=1 init=1
        self.convs = nn.ModuleList([nn.Conv1d(c.emb, c.filters, k) for k in (2, 3, 4)])  # zoo: layer name=convs.1 init=1 relu=convs.1
        self.dropout = nn.Dropout(0.2)  # zoo: dropout modules=dropout,fc
        self.fc = nn.Linear(3 * c.filters, c.classes)  # zoo: layer name=fc head=1 new="nn.Linear(48, 4)"

    def forward(self, tokens):
        x = self.embedding(tokens).transpose(1, 2)  # zoo: cut var=x upstream=embedding
        pooled = [F.relu(conv(x)).max(dim=2).values for conv in self.convs]
        h = torch.cat(pooled, dim=1)  # zoo: cut var=h upstream=embedding,convs
        return self.fc(self.dropout(h))  # zoo: logits


def make_corpus(c, n=800):
    """Each topic has three bigrams (a, b); a sequence holds two of its topic's bigrams among noise tokens."""
    g = torch.Generator().manual_seed(c.seed)
    x = torch.randint(c.classes * 6, c.vocab, (n, c.seq), generator=g)
    y = torch.randint(0, c.classes, (n,), generator=g)
    for i in range(n):
        for _ in range(2):
            k = int(torch.randint(0, 3, (1,), generator=g))
            pos = int(torch.randint(0, c.seq - 1, (1,), generator=g))
            a = int(y[i]) * 6 + 2 * k
            x[i, pos], x[i, pos + 1] = a, a + 1
    return x, y


def run(c):
    torch.manual_seed(c.seed)
    x, y = make_corpus(c)
    loader = DataLoader(TensorDataset(x, y), batch_size=c.batch, shuffle=True)
    model = TextCNN(c)  # zoo: model var=model
    optimizer = torch.optim.Adam(model.parameters(), lr=c.lr)  # zoo: optimizer var=optimizer kind=adam
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)  # zoo: sched var=scheduler per=epoch
    history = []
    for epoch in range(c.epochs):  # zoo: loop
        model.train()  # zoo: train_mode
        losses = []
        for tokens, labels in loader:
            logits = model(tokens)  # zoo: forward
            loss = F.cross_entropy(logits, labels)  # zoo: loss kind=ce pred=logits target=labels classes=4 fn=1
            optimizer.zero_grad()  # zoo: zero_grad
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
            losses.append(loss.item())
        scheduler.step()  # zoo: sched_step per=epoch
        history.append(sum(losses) / len(losses))
        print(f"epoch {epoch}: loss {history[-1]:.4f}")
    return history


if __name__ == "__main__":
    run(cfg)
