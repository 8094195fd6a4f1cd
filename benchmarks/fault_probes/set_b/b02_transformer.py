import math
import torch
import torch.nn as nn

torch.manual_seed(0)

PAD, CLS = 0, 1
N_CLASSES = 4
MARKER0 = 2                      # marker tokens 2..5 decide the class
VOCAB = 32
MAX_LEN = 20                     # longest sequence, CLS excluded
PAD_TO = 24                      # batches are padded to this length
N_SAMPLES = 2048
BATCH = 32
STEPS = 120
WARMUP = 20
D_MODEL = 32


def make_example():
    n = int(torch.randint(6, MAX_LEN + 1, (1,)))
    toks = torch.randint(MARKER0 + N_CLASSES, VOCAB, (n,))
    y = int(torch.randint(0, N_CLASSES, (1,)))
    toks[int(torch.randint(0, n, (1,)))] = MARKER0 + y
    return toks, y


def collate(examples):
    x = torch.full((len(examples), PAD_TO), PAD, dtype=torch.long)
    x[:, 0] = CLS
    ys = []
    for i, (toks, y) in enumerate(examples):
        x[i, 1:1 + len(toks)] = toks
        ys.append(y)
    return x, torch.tensor(ys)


class TransformerClassifier(nn.Module):
    def __init__(self, vocab, d_model=D_MODEL, nhead=4, num_layers=2, n_classes=N_CLASSES):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos_emb = nn.Embedding(PAD_TO, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=64,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(),
                                  nn.Linear(d_model, n_classes))

    def forward(self, x):
        pos = torch.arange(x.size(1), device=x.device)
        h = self.tok_emb(x) + self.pos_emb(pos)[None]
        pad_mask = x == PAD
        h = self.encoder(h, src_key_padding_mask=pad_mask)
        return self.head(self.norm(h[:, 0]))


data = [make_example() for _ in range(N_SAMPLES)]
model = TransformerClassifier(VOCAB)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda step: min(1.0, (step + 1) / WARMUP))
criterion = nn.CrossEntropyLoss()

losses = []
model.train()
for step in range(STEPS):
    idx = torch.randint(0, N_SAMPLES, (BATCH,)).tolist()
    xb, yb = collate([data[i] for i in idx])
    optimizer.zero_grad()
    logits = model(xb)
    loss = criterion(logits, yb)
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


init = sum(losses[:5]) / 5
final = sum(losses[-5:]) / 5
print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {len(losses)}")
