import math
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

logging.set_verbosity_error()

torch.manual_seed(0)

PAD = 0
VOCAB = 96
SEQ_LEN = 32
N_SAMPLES = 1024
BATCH = 16
STEPS = 120
N_PATTERNS = 16


# a small library of short token patterns; every row repeats one of them
perm = torch.randperm(VOCAB - 1) + 1
PATTERNS, k = [], 0
for j in range(N_PATTERNS):
    period = 3 + j % 4
    PATTERNS.append(perm[k:k + period])
    k += period


def make_batch_data(n):
    ids = torch.full((n, SEQ_LEN), PAD, dtype=torch.long)
    mask = torch.zeros((n, SEQ_LEN), dtype=torch.long)
    for i in range(n):
        pattern = PATTERNS[int(torch.randint(0, N_PATTERNS, (1,)))]
        pattern = pattern.roll(-int(torch.randint(0, len(pattern), (1,))))
        length = int(torch.randint(20, SEQ_LEN + 1, (1,)))
        ids[i, :length] = pattern.repeat(SEQ_LEN // len(pattern) + 1)[:length]
        mask[i, :length] = 1
    return ids, mask


config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=64, n_layer=2, n_head=2,
                    pad_token_id=PAD, bos_token_id=PAD, eos_token_id=PAD)
model = GPT2LMHeadModel(config)
ids_all, mask_all = make_batch_data(N_SAMPLES)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

losses = []
model.train()
for step in range(STEPS):
    idx = torch.randint(0, N_SAMPLES, (BATCH,))
    input_ids, attention_mask = ids_all[idx], mask_all[idx]
    labels = input_ids.masked_fill(input_ids == PAD, -100)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    loss = out.loss
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
    losses.append(loss.item())


def fmt(v):
    return "nan" if not math.isfinite(v) else f"{v:.4f}"


init = sum(losses[:5]) / 5
final = sum(losses[-5:]) / 5
print(f"initial loss {fmt(init)} final loss {fmt(final)} steps {len(losses)}")
