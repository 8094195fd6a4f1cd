"""Tiny ELECTRA sequence classifier (config only, no download), gradient accumulation."""
import math

import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import (ElectraConfig, ElectraForSequenceClassification,
                          get_cosine_schedule_with_warmup)
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()

SEED = 0
VOCAB = 120
MAX_LEN = 24
N_TRAIN = 1920
MICRO_BATCH = 8
ACCUM_STEPS = 4
EPOCHS = 2
LR = 1e-3
WEIGHT_DECAY = 0.01
WARMUP_FRAC = 0.1
CLS, PAD = 1, 0
KEYWORDS = (5, 6, 7)   # class 0 / 1 / 2 keyword, appears 2-4 times


def make_data(n, gen):
    ids = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    labels = torch.randint(0, len(KEYWORDS), (n,), generator=gen)
    for i in range(n):
        length = int(torch.randint(8, MAX_LEN + 1, (1,), generator=gen))
        body = torch.randint(10, VOCAB, (length - 1,), generator=gen)
        k = int(torch.randint(2, 5, (1,), generator=gen))
        pos = torch.randperm(length - 1, generator=gen)[:k]
        body[pos] = KEYWORDS[int(labels[i])]
        ids[i, 0] = CLS
        ids[i, 1:length] = body
    return ids, labels


def build_model():
    config = ElectraConfig(
        vocab_size=VOCAB,
        embedding_size=64,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=MAX_LEN,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        num_labels=len(KEYWORDS),
        pad_token_id=PAD,
    )
    return ElectraForSequenceClassification(config)


def param_groups(model, weight_decay):
    no_decay = ("bias", "LayerNorm.weight")
    decay, other = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (other if any(nd in name for nd in no_decay) else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]


def main():
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    ids, labels = make_data(N_TRAIN, gen)
    mask = (ids != PAD).long()
    loader = DataLoader(TensorDataset(ids, mask, labels), batch_size=MICRO_BATCH,
                        shuffle=True, drop_last=True)

    model = build_model()
    optimizer = torch.optim.AdamW(param_groups(model, WEIGHT_DECAY), lr=LR)
    total_steps = EPOCHS * len(loader) // ACCUM_STEPS
    scheduler = get_cosine_schedule_with_warmup(
        optimizer, num_warmup_steps=int(WARMUP_FRAC * total_steps),
        num_training_steps=total_steps)

    losses = []
    step_loss = 0.0
    model.train()
    optimizer.zero_grad()
    for epoch in range(EPOCHS):
        for i, (x, m, y) in enumerate(loader):
            out = model(input_ids=x, attention_mask=m, labels=y)
            loss = out.loss / ACCUM_STEPS
            loss.backward()
            step_loss += loss.item()
            if (i + 1) % ACCUM_STEPS == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.zero_grad()
                optimizer.step()
                scheduler.step()
                losses.append(step_loss)
                step_loss = 0.0
                if len(losses) % 20 == 0:
                    print(f"step {len(losses)} loss {losses[-1]:.4f} "
                          f"lr {scheduler.get_last_lr()[0]:.2e}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
