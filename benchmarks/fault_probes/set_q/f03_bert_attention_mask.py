"""Sequence classification with a small DistilBERT trained from scratch.

Synthetic token sequences: filler tokens plus one "marker" token; the class is
the marker's group. Sequences have variable length and are right-padded.
"""
import argparse
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import DistilBertConfig, DistilBertForSequenceClassification, get_linear_schedule_with_warmup

PAD_ID = 0
CLS_ID = 1
NUM_CLASSES = 4
MARKERS_PER_CLASS = 4
FIRST_MARKER = 4
FIRST_FILLER = FIRST_MARKER + NUM_CLASSES * MARKERS_PER_CLASS
VOCAB_SIZE = 64


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--n-train", type=int, default=2048)
    p.add_argument("--max-len", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args([])


def make_dataset(n, max_len, gen):
    input_ids = torch.full((n, max_len), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros((n, max_len), dtype=torch.long)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    lengths = torch.randint(8, max_len + 1, (n,), generator=gen)
    for i in range(n):
        L = int(lengths[i])
        seq = torch.randint(FIRST_FILLER, VOCAB_SIZE, (L,), generator=gen)
        seq[0] = CLS_ID
        pos = int(torch.randint(1, L, (1,), generator=gen))
        marker = FIRST_MARKER + int(labels[i]) * MARKERS_PER_CLASS + int(torch.randint(0, MARKERS_PER_CLASS, (1,), generator=gen))
        seq[pos] = marker
        input_ids[i, :L] = seq
        attention_mask[i, L:] = 1
    return input_ids, attention_mask, labels


def build_model(args):
    config = DistilBertConfig(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=64,
        dim=64,
        n_layers=2,
        n_heads=4,
        hidden_dim=128,
        dropout=0.1,
        attention_dropout=0.1,
        seq_classif_dropout=0.1,
        num_labels=NUM_CLASSES,
        pad_token_id=PAD_ID,
    )
    return DistilBertForSequenceClassification(config)


def build_optimizer(model, args):
    no_decay = ["bias", "LayerNorm.weight", "layer_norm.weight"]
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
         "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args.lr)


def fmt(xs):
    v = sum(xs) / len(xs)
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    input_ids, attention_mask, labels = make_dataset(args.n_train, args.max_len, gen)
    loader = DataLoader(TensorDataset(input_ids, attention_mask, labels), batch_size=args.batch_size, shuffle=True)

    model = build_model(args)
    optimizer = build_optimizer(model, args)
    total_steps = args.epochs * len(loader)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_steps,
                                                num_training_steps=total_steps)
    criterion = nn.CrossEntropyLoss()

    losses = []
    model.train()
    for epoch in range(args.epochs):
        for ids, mask, y in loader:
            optimizer.zero_grad()
            logits = model(input_ids=ids, attention_mask=mask).logits
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        print(f"epoch {epoch} loss {sum(losses[-len(loader):]) / len(loader):.4f}")

    print(f"initial loss {fmt(losses[:5])} final loss {fmt(losses[-5:])} steps {len(losses)}")


if __name__ == "__main__":
    main()
