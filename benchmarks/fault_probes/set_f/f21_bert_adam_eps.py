import math
import torch
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

torch.manual_seed(0)

VOCAB = 120
MAX_LEN = 24
PAD_ID = 0
CLS_ID = 1
SEP_ID = 2
N_TRAIN = 1536
BATCH = 32
EPOCHS = 3


def make_examples(n, keywords, g):
    # random filler tokens with one keyword dropped somewhere, padded to MAX_LEN
    input_ids = torch.full((n, MAX_LEN), PAD_ID, dtype=torch.long)
    for i in range(n):
        length = torch.randint(6, MAX_LEN - 1, (1,), generator=g).item()
        body = torch.randint(20, VOCAB, (length,), generator=g)
        body[torch.randint(0, length, (1,), generator=g)] = keywords[torch.randint(0, len(keywords), (1,), generator=g)]
        seq = torch.cat([torch.tensor([CLS_ID]), body, torch.tensor([SEP_ID])])
        input_ids[i, :seq.numel()] = seq
    return input_ids


g = torch.Generator().manual_seed(1)
positive = make_examples(N_TRAIN // 2, torch.arange(10, 15), g)
negative = make_examples(N_TRAIN // 2, torch.arange(15, 20), g)
input_ids = torch.cat([positive, negative])
labels = torch.cat([torch.ones(N_TRAIN // 2, dtype=torch.long), torch.zeros(N_TRAIN // 2, dtype=torch.long)])
perm = torch.randperm(N_TRAIN, generator=g)
input_ids, labels = input_ids[perm], labels[perm]
attention_mask = (input_ids != PAD_ID).long()

config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=MAX_LEN,
    num_labels=2,
    pad_token_id=PAD_ID,
)
model = BertForSequenceClassification(config)

steps_per_epoch = N_TRAIN // BATCH
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, eps=1e-1)
scheduler = get_linear_schedule_with_warmup(
    optimizer, num_warmup_steps=15, num_training_steps=EPOCHS * steps_per_epoch
)

model.train()
losses = []
for epoch in range(EPOCHS):
    order = torch.randperm(N_TRAIN, generator=g)
    for i in range(steps_per_epoch):
        idx = order[i * BATCH:(i + 1) * BATCH]
        out = model(input_ids=input_ids[idx], attention_mask=attention_mask[idx], labels=labels[idx])
        loss = out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    print(f"epoch {epoch} loss {sum(losses[-steps_per_epoch:]) / steps_per_epoch:.4f}")


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
