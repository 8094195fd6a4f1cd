"""Tiny GPT-2 trained from scratch as a causal LM on a synthetic token grammar.

Each sequence is a short "phrase" walked through a sparse random transition table
(every token has two possible successors), followed by copies of the same phrase,
cut at a random length and right-padded. The first phrase is only partly
predictable (one bit per token), the copies are fully predictable from context.
"""
import math
import random

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()

SEED = 0
VOCAB = 32          # 0 = PAD, 1 = BOS, 2..31 content tokens
PAD, BOS = 0, 1
PHRASE = 6
MAX_LEN = 24
MICRO_BATCH = 16
ACCUM_STEPS = 2
OPT_STEPS = 200
LR = 3e-3
WEIGHT_DECAY = 0.01
WARMUP_FRAC = 0.1
DROPOUT = 0.0

random.seed(SEED)
torch.manual_seed(SEED)

content = list(range(2, VOCAB))
successors = {t: random.sample(content, 2) for t in content}


def make_sequence():
    tok = random.choice(content)
    phrase = [tok]
    for _ in range(PHRASE - 1):
        tok = random.choice(successors[tok])
        phrase.append(tok)
    length = random.randint(14, MAX_LEN)
    body = (phrase * 4)[: length - 1]
    return [BOS] + body


def make_batch(n):
    seqs = [make_sequence() for _ in range(n)]
    input_ids = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    attention_mask = torch.zeros((n, MAX_LEN), dtype=torch.long)
    for i, s in enumerate(seqs):
        input_ids[i, : len(s)] = torch.tensor(s)
        attention_mask[i, : len(s)] = 1
    return input_ids, attention_mask


config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=MAX_LEN,
    n_embd=64,
    n_layer=2,
    n_head=4,
    n_inner=256,
    resid_pdrop=DROPOUT,
    embd_pdrop=DROPOUT,
    attn_pdrop=DROPOUT,
    bos_token_id=BOS,
    eos_token_id=BOS,
    pad_token_id=PAD,
)
model = GPT2LMHeadModel(config)
model.train()

no_decay = ["bias", "ln_1.weight", "ln_2.weight", "ln_f.weight"]
grouped_parameters = [
    {
        "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
        "weight_decay": WEIGHT_DECAY,
    },
    {
        "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
        "weight_decay": 0.0,
    },
]
optimizer = torch.optim.AdamW(grouped_parameters, lr=LR)
scheduler = get_linear_schedule_with_warmup(
    optimizer,
    num_warmup_steps=int(WARMUP_FRAC * OPT_STEPS),
    num_training_steps=OPT_STEPS,
)

losses = []
optimizer.zero_grad()
for step in range(OPT_STEPS):
    step_loss = 0.0
    for micro in range(ACCUM_STEPS):
        input_ids, attention_mask = make_batch(MICRO_BATCH)
        labels = input_ids.clone()
        labels[attention_mask == 0] = -100
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        loss = out.loss / ACCUM_STEPS
        loss.backward()
        step_loss += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    losses.append(step_loss)


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
