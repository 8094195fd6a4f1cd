import math
import torch
import torch.nn as nn

torch.manual_seed(0)

PAD, BOS = 0, 1
VOCAB = 12          # tokens 2..11 are content
MAX_LEN = 8
N = 2000


def make_data(n):
    src = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    tgt = torch.full((n, MAX_LEN + 1), PAD, dtype=torch.long)
    lengths = torch.randint(4, MAX_LEN + 1, (n,))
    for i in range(n):
        L = lengths[i].item()
        seq = torch.randint(2, VOCAB, (L,))
        src[i, :L] = seq
        tgt[i, 0] = BOS
        tgt[i, 1:L + 1] = seq.flip(0)
    return src, tgt


src_all, tgt_all = make_data(N)


class Seq2Seq(nn.Module):
    def __init__(self, vocab, emb=32, hidden=96):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.encoder = nn.GRU(emb, hidden, batch_first=True)
        self.decoder = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, tgt_in):
        _, h = self.encoder(self.src_emb(src))
        dec_out, _ = self.decoder(self.tgt_emb(tgt_in), h.detach())
        return self.out(dec_out)


model = Seq2Seq(VOCAB)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss(ignore_index=PAD)

batch_size = 64
losses = []
step = 0
while step < 250:
    perm = torch.randperm(N)
    for i in range(0, N - batch_size + 1, batch_size):
        idx = perm[i:i + batch_size]
        src, tgt = src_all[idx], tgt_all[idx]
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        optimizer.zero_grad()
        logits = model(src, tgt_in)
        loss = criterion(logits.reshape(-1, VOCAB), tgt_out.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        step += 1
        if step >= 250:
            break


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
