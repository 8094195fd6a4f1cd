import math
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N_TOKENS = 10          # real symbols 1..10, 0 is the CTC blank
FEAT = 20
BATCH = 16
STEPS = 150

# each symbol has a spectral "signature"; an utterance is the symbols held for 2-4 frames
protos = torch.randn(N_TOKENS + 1, FEAT) * 1.5
protos[0] = 0.0  # silence


def make_batch(gen):
    feats, targets, in_lens, tgt_lens = [], [], [], []
    for _ in range(BATCH):
        n = int(torch.randint(3, 7, (1,), generator=gen))
        toks = torch.randint(1, N_TOKENS + 1, (n,), generator=gen)
        frames = [protos[0].expand(int(torch.randint(1, 3, (1,), generator=gen)), FEAT)]
        for t in toks.tolist():
            d = int(torch.randint(2, 5, (1,), generator=gen))
            frames.append(protos[t].expand(d, FEAT))
            frames.append(protos[0].expand(1, FEAT))
        x = torch.cat(frames, 0)
        x = x + 0.5 * torch.randn(x.shape, generator=gen)
        feats.append(x)
        targets.append(toks)
        in_lens.append(x.shape[0])
        tgt_lens.append(n)
    T = max(in_lens)
    xb = torch.zeros(BATCH, T, FEAT)
    for i, x in enumerate(feats):
        xb[i, : x.shape[0]] = x
    yb = torch.zeros(BATCH, max(tgt_lens), dtype=torch.long)
    for i, y in enumerate(targets):
        yb[i, : y.shape[0]] = y
    return xb, yb, torch.tensor(in_lens), torch.tensor(tgt_lens)


class SpeechModel(nn.Module):
    def __init__(self, feat=FEAT, hidden=48, vocab=N_TOKENS + 1):
        super().__init__()
        self.frontend = nn.Sequential(
            nn.Conv1d(feat, 64, kernel_size=3, padding=1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
            nn.Conv1d(64, 64, kernel_size=3, padding=1),
            nn.BatchNorm1d(64),
            nn.ReLU(),
        )
        self.encoder = nn.LSTM(64, hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden, vocab)

    def forward(self, x, lengths):
        # x: (B, T, F)
        h = self.frontend(x.transpose(1, 2)).transpose(1, 2)
        packed = nn.utils.rnn.pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return self.classifier(out)  # (B, T, V)


model = SpeechModel()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
gen = torch.Generator().manual_seed(1)

losses = []
for step in range(STEPS):
    x, y, in_lens, tgt_lens = make_batch(gen)
    logits = model(x, in_lens)
    log_probs = F.log_softmax(logits, dim=-1).transpose(0, 1)  # (T, B, V)
    loss = ctc(log_probs, y, in_lens, tgt_lens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
