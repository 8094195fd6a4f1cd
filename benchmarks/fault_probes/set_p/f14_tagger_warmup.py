import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader

VOCAB = 60
NUM_TAGS = 6
PAD = 0
EMB_DIM = 32
HIDDEN = 48
BATCH = 32
LR = 5e-3
EPOCHS = 4
N_SENT = 1280

torch.manual_seed(0)

# synthetic tagging task: each token has a "base" tag, but tokens of the ambiguous group
# take the tag of the word before them, so the tagger needs context
token_tag = torch.randint(1, NUM_TAGS, (VOCAB,))
AMBIGUOUS = set(range(50, VOCAB))


def make_sentence():
    n = int(torch.randint(5, 21, (1,)))
    toks = torch.randint(1, VOCAB, (n,))
    tags = token_tag[toks].clone()
    for i in range(n):
        if int(toks[i]) in AMBIGUOUS:
            tags[i] = 0 if i == 0 else tags[i - 1]
    return toks, tags


sentences = [make_sentence() for _ in range(N_SENT)]


def collate(batch):
    toks = [t for t, _ in batch]
    tags = [g for _, g in batch]
    lengths = torch.tensor([len(t) for t in toks])
    toks = pad_sequence(toks, batch_first=True, padding_value=PAD)
    tags = pad_sequence(tags, batch_first=True, padding_value=-100)
    return toks, tags, lengths


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab, emb_dim, hidden, num_tags):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb_dim, padding_idx=PAD)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, num_tags)

    def forward(self, toks, lengths):
        emb = self.embedding(toks)
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=toks.size(1))
        return self.head(out)


loader = DataLoader(sentences, batch_size=BATCH, shuffle=True, collate_fn=collate)
model = BiLSTMTagger(VOCAB, EMB_DIM, HIDDEN, NUM_TAGS)
optimizer = torch.optim.Adam(model.parameters(), lr=LR)
WARMUP_STEPS = 4000
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))

losses = []
for epoch in range(EPOCHS):
    for toks, tags, lengths in loader:
        logits = model(toks, lengths)
        loss = F.cross_entropy(logits.reshape(-1, NUM_TAGS), tags.reshape(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


print(f"initial loss {fmt(sum(losses[:5]) / 5)} final loss {fmt(sum(losses[-5:]) / 5)} steps {len(losses)}")
