import math
import torch
import torch.nn as nn
from transformers import BertConfig, BertForTokenClassification, get_linear_schedule_with_warmup

torch.manual_seed(0)

VOCAB = 12
PAD = 0
MAX_LEN = 12
NUM_TAGS = 6
BATCH = 32
EPOCHS = 3
BATCHES_PER_EPOCH = 100


def tag_sequence(tokens):
    # tag = residue class of the token, plus the parity of its left neighbour
    tags = []
    prev = 0
    for t in tokens:
        tags.append((t % 3) + 3 * (prev % 2))
        prev = t
    return tags


def make_dataset(n, gen):
    input_ids = torch.full((n, MAX_LEN), PAD, dtype=torch.long)
    labels = torch.full((n, MAX_LEN), -100, dtype=torch.long)
    lengths = torch.randint(4, MAX_LEN + 1, (n,), generator=gen)
    for i in range(n):
        L = int(lengths[i])
        toks = torch.randint(1, VOCAB, (L,), generator=gen).tolist()
        input_ids[i, :L] = torch.tensor(toks)
        labels[i, :L] = torch.tensor(tag_sequence(toks))
    attention_mask = (input_ids != PAD).long()
    return input_ids, attention_mask, labels


gen = torch.Generator().manual_seed(1)
input_ids, attention_mask, labels = make_dataset(BATCH * BATCHES_PER_EPOCH, gen)

config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=MAX_LEN,
    type_vocab_size=1,
    pad_token_id=PAD,
    num_labels=NUM_TAGS,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
model = BertForTokenClassification(config)

num_training_steps = EPOCHS * BATCHES_PER_EPOCH
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=20, num_training_steps=num_training_steps)

loss_fn = nn.CrossEntropyLoss(ignore_index=-100)

losses = []
model.train()
for epoch in range(EPOCHS):
    perm = torch.randperm(input_ids.shape[0])
    for b in range(BATCHES_PER_EPOCH):
        idx = perm[b * BATCH:(b + 1) * BATCH]
        logits = model(input_ids=input_ids[idx], attention_mask=attention_mask[idx]).logits
        loss = loss_fn(logits.permute(0, 2, 1), labels[idx])
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.25)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())

first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
fmt = lambda v: f"{v:.4f}" if math.isfinite(v) else "nan"
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
