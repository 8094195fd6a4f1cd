"""GRU sentiment classifier on synthetic variable-length token sequences."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--vocab", type=int, default=60)
parser.add_argument("--emb", type=int, default=32)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--lr", type=float, default=3e-1)
parser.add_argument("--clip", type=float, default=1.0)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

PAD = 0
POS_WORDS = range(1, 9)     # "great", "love", ...
NEG_WORDS = range(9, 17)    # "awful", "boring", ...


def make_reviews(n, vocab, gen):
    """Reviews of 6..40 tokens; sentiment = more positive than negative words."""
    seqs, labels = [], []
    while len(seqs) < n:
        length = int(torch.randint(6, 41, (1,), generator=gen))
        toks = torch.randint(17, vocab, (length,), generator=gen)
        n_pos = int(torch.randint(0, 5, (1,), generator=gen))
        n_neg = int(torch.randint(0, 5, (1,), generator=gen))
        if n_pos == n_neg:
            continue
        slots = torch.randperm(length, generator=gen)[: n_pos + n_neg]
        k = min(n_pos, len(slots))
        toks[slots[:k]] = torch.randint(1, 9, (k,), generator=gen)
        toks[slots[k:]] = torch.randint(9, 17, (len(slots) - k,), generator=gen)
        seqs.append(toks)
        labels.append(int((toks < 9).sum() > ((toks >= 9) & (toks < 17)).sum()))
    return seqs, labels


class ReviewDataset(Dataset):
    def __init__(self, seqs, labels):
        self.seqs = seqs
        self.labels = labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        return self.seqs[i], self.labels[i]


def collate(batch):
    toks, labels = zip(*batch)
    lengths = torch.tensor([len(t) for t in toks])
    padded = pad_sequence(list(toks), batch_first=True, padding_value=PAD)
    return padded, lengths, torch.tensor(labels, dtype=torch.long)


class GRUClassifier(nn.Module):
    def __init__(self, vocab, emb, hidden, n_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.head = nn.Sequential(
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, tokens):
        mask = (tokens != PAD).unsqueeze(-1).float()
        out, _ = self.gru(self.embed(tokens))
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


def main():
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    seqs, labels = make_reviews(1280, args.vocab, gen)
    train_ds = ReviewDataset(seqs, labels)
    loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True,
                        collate_fn=collate, drop_last=True)

    model = GRUClassifier(args.vocab, args.emb, args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    losses = []
    for epoch in range(args.epochs):
        model.train()
        correct = 0
        for tokens, lengths, y in loader:
            optimizer.zero_grad()
            logits = model(tokens)
            loss = criterion(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            losses.append(loss.item())
            correct += (logits.argmax(-1) == y).sum().item()
        print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f} "
              f"acc {correct / (len(loader) * args.batch_size):.3f}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
