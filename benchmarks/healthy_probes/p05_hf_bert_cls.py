"""Healthy probe 5: Hugging Face BertForSequenceClassification from a tiny BertConfig, padded batches + attention_mask."""
import torch
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

torch.manual_seed(0)
VOCAB, PAD_ID, CLS_ID, SEP_ID, MAX_LEN = 100, 0, 1, 2, 24
g = torch.Generator().manual_seed(0)


def make_example():
    # label 1 if the "positive" token 7 appears more often than the "negative" token 8
    n = int(torch.randint(5, MAX_LEN - 2, (1,), generator=g))
    body = torch.randint(3, VOCAB, (n,), generator=g)
    label = int(torch.randint(0, 2, (1,), generator=g))
    k = int(torch.randint(1, 4, (1,), generator=g))
    pos = torch.randperm(n, generator=g)[:k]
    body[pos] = 7 if label else 8
    return [CLS_ID] + body.tolist() + [SEP_ID], label


def collate(examples):
    L = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), L), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), L), dtype=torch.long)
    for i, (ids, _) in enumerate(examples):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        attention_mask[i, :len(ids)] = 1
    labels = torch.tensor([y for _, y in examples])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


train_set = [make_example() for _ in range(512)]
batches = [collate(train_set[i:i + 16]) for i in range(0, len(train_set), 16)]

config = BertConfig(
    vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=128, max_position_embeddings=64, num_labels=2, pad_token_id=PAD_ID,
)
model = BertForSequenceClassification(config)
no_decay = ["bias", "LayerNorm.weight"]
grouped = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(grouped, lr=1e-3)
num_epochs = 5
total = num_epochs * len(batches)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=int(0.1 * total), num_training_steps=total)

losses = []
model.train()
for epoch in range(num_epochs):
    for batch in batches:
        outputs = model(**batch)
        loss = outputs.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    print(f"epoch {epoch} loss {loss.item():.4f}")

print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
