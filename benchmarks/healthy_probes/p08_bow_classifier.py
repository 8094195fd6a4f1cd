"""Healthy probe 8: bag-of-words binary sentiment classifier over sparse count vectors, BCEWithLogitsLoss + RMSprop."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(11)
VOCAB, N_DOCS, DOC_LEN = 2000, 2000, 20
g = torch.Generator().manual_seed(11)

# Zipf-ish word frequencies; a few hundred words carry sentiment
freq = 1.0 / torch.arange(1, VOCAB + 1).float()
polarity = torch.zeros(VOCAB)
sent_words = torch.randperm(VOCAB, generator=g)[:300]
polarity[sent_words[:150]] = 1.0
polarity[sent_words[150:]] = -1.0


def make_docs(n):
    y = torch.randint(0, 2, (n,), generator=g).float()
    X = torch.zeros(n, VOCAB)
    for d in range(n):
        w = freq.clone()
        w[polarity == (1.0 if y[d] else -1.0)] *= 8.0
        words = torch.multinomial(w, DOC_LEN, replacement=True, generator=g)
        X[d].index_add_(0, words, torch.ones(DOC_LEN))
    return X, y


X, y = make_docs(N_DOCS)
print(f"feature density {(X > 0).float().mean().item():.4f}")
loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)


class BowClassifier(nn.Module):
    def __init__(self, vocab_size, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(vocab_size, hidden)
        self.act = nn.ReLU()
        self.drop = nn.Dropout(0.3)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        x = torch.log1p(x)  # damp raw counts
        return self.out(self.drop(self.act(self.fc1(x)))).squeeze(-1)


model = BowClassifier(VOCAB)
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.99)
losses = []
for epoch in range(6):
    model.train()
    total = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        logits = model(xb)
        loss = criterion(logits, yb)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        total += loss.item() * len(xb)
    print(f"epoch {epoch} train loss {total / len(loader.dataset):.4f}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
