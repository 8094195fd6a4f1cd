"""Bag-of-words sentiment classifier with BCEWithLogitsLoss.

Family: MLP over sparse bag-of-words count vectors (most features exactly
zero), one logit, BCEWithLogitsLoss, RMSprop, CosineAnnealingLR stepped once
per epoch.
Style: `main()` with argparse, a tokenised toy corpus turned into count
vectors with torch.bincount, a `SentimentMLP` class, a `Dataset` built
with TensorDataset, accuracy printed per epoch.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class SentimentMLP(nn.Module):
    def __init__(self, vocab, hidden=64):
        super().__init__()
        self.encoder = nn.Linear(vocab, hidden)  # zoo: layer name=encoder first=1 frozen=1 missing=1
        self.relu = nn.ReLU()
        self.classifier = nn.Linear(hidden, 1)  # zoo: layer name=classifier head=1 missing=1 new="nn.Linear(64, 1)"

    def forward(self, counts):
        return self.classifier(self.relu(self.encoder(counts))).squeeze(1)  # zoo: logits


def corpus(n_docs, vocab, doc_len, seed):
    g = torch.Generator().manual_seed(seed)
    polarity = torch.randn(vocab, generator=g)
    docs = torch.randint(0, vocab, (n_docs, doc_len), generator=g)
    counts = torch.stack([torch.bincount(d, minlength=vocab) for d in docs]).float()  # zoo: inputs var=counts sparse=1
    labels = (counts @ polarity > 0).float()  # zoo: targets var=labels kind=binary
    return counts, labels


def main():
    parser = argparse.ArgumentParser(description="toy sentiment classifier")
    parser.add_argument("--vocab", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--lr", type=float, default=1e-3)  # zoo: lr value=1e-3
    args = parser.parse_args()

    torch.manual_seed(0)
    counts, labels = corpus(1536, args.vocab, 24, seed=0)
    loader = DataLoader(TensorDataset(counts, labels), batch_size=48, shuffle=True)
    model = SentimentMLP(args.vocab)  # zoo: model var=model relu=relu
    criterion = nn.BCEWithLogitsLoss()  # zoo: criterion kind=bce
    optimizer = torch.optim.RMSprop(model.parameters(), lr=args.lr)  # zoo: optimizer var=optimizer kind=rmsprop
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)  # zoo: sched var=scheduler per=epoch
    for epoch in range(args.epochs):  # zoo: loop
        model.train()  # zoo: train_mode
        correct = 0
        for xb, yb in loader:
            optimizer.zero_grad()  # zoo: zero_grad
            logits = model(xb)  # zoo: forward
            loss = criterion(logits, yb)  # zoo: loss kind=bce pred=logits target=yb
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
            correct += ((logits > 0).float() == yb).sum().item()
        scheduler.step()  # zoo: sched_step per=epoch
        print(f"epoch {epoch}: loss {loss.item():.4f} acc {correct / len(labels):.3f}")


if __name__ == "__main__":
    main()
