import math
import torch
import torch.nn as nn

torch.manual_seed(0)

VOCAB = 40
SEQ_LEN = 16
N_CLASSES = 4
N_SAMPLES = 2048
BATCH = 32
STEPS = 150


def make_data(n):
    # filler tokens come from [N_CLASSES + 1, VOCAB); one marker token decides the class
    x = torch.randint(N_CLASSES + 1, VOCAB, (n, SEQ_LEN))
    y = torch.randint(0, N_CLASSES, (n,))
    pos = torch.randint(0, SEQ_LEN, (n,))
    x[torch.arange(n), pos] = y + 1
    return x, y


class LSTMClassifier(nn.Module):
    def __init__(self, vocab, emb_dim=32, hidden=64, n_classes=N_CLASSES):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb_dim)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, x):
        e = self.embed(x)
        out, (h, c) = self.lstm(e)
        return self.fc(self.drop(h[-1]))


x_all, y_all = make_data(N_SAMPLES)
model = LSTMClassifier(VOCAB)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss()

losses = []
for step in range(STEPS):
    idx = torch.randint(0, N_SAMPLES, (BATCH,))
    xb, yb = x_all[idx], y_all[idx]
    optimizer.zero_grad()
    logits = model(xb)
    loss = criterion(logits, yb)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


init = sum(losses[:5]) / 5
final = sum(losses[-5:]) / 5
print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {len(losses)}")
