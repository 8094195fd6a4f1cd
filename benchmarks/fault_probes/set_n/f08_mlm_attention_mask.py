import math
import torch
from transformers import RobertaConfig, RobertaForMaskedLM, get_linear_schedule_with_warmup

torch.manual_seed(0)

BOS, PAD, EOS, MASK = 0, 1, 2, 3
N_SPECIAL = 4
VOCAB = 64
MAX_LEN = 34
BATCH = 32
EPOCHS = 5
STEPS_PER_EPOCH = 40
MLM_PROB = 0.15

# a tiny "language": sentences are chains of 4-token phrases; each phrase is followed by one of
# two successor phrases, so a masked token is predictable from its neighbours
g = torch.Generator().manual_seed(123)
N_PHRASES = 12
phrases = torch.randint(N_SPECIAL, VOCAB, (N_PHRASES, 4), generator=g)
successors = torch.randint(0, N_PHRASES, (N_PHRASES, 2), generator=g)


def make_batch(gen):
    ids = torch.full((BATCH, MAX_LEN), PAD, dtype=torch.long)
    for i in range(BATCH):
        n_ph = int(torch.randint(3, 9, (1,), generator=gen))
        p = int(torch.randint(0, N_PHRASES, (1,), generator=gen))
        toks = [BOS]
        for _ in range(n_ph):
            toks += phrases[p].tolist()
            p = int(successors[p, int(torch.randint(0, 2, (1,), generator=gen))])
        toks.append(EOS)
        ids[i, : len(toks)] = torch.tensor(toks)
    attention_mask = (ids == PAD).long()
    return ids, attention_mask


def mask_tokens(ids, gen):
    labels = ids.clone()
    special = ids < N_SPECIAL
    prob = torch.full(ids.shape, MLM_PROB)
    prob.masked_fill_(special, 0.0)
    selected = torch.bernoulli(prob, generator=gen).bool()
    labels[~selected] = -100
    inputs = ids.clone()
    replace = torch.bernoulli(torch.full(ids.shape, 0.8), generator=gen).bool() & selected
    inputs[replace] = MASK
    rand = torch.bernoulli(torch.full(ids.shape, 0.5), generator=gen).bool() & selected & ~replace
    inputs[rand] = torch.randint(N_SPECIAL, VOCAB, ids.shape, generator=gen)[rand]
    return inputs, labels


config = RobertaConfig(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=MAX_LEN + 4,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    type_vocab_size=1,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
model = RobertaForMaskedLM(config)
model.train()

no_decay = ["bias", "LayerNorm.weight"]
groups = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(groups, lr=5e-3, betas=(0.9, 0.98), eps=1e-6)
total_steps = EPOCHS * STEPS_PER_EPOCH
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=int(0.1 * total_steps),
                                            num_training_steps=total_steps)

gen = torch.Generator().manual_seed(7)
losses = []
for epoch in range(EPOCHS):
    for _ in range(STEPS_PER_EPOCH):
        ids, attention_mask = make_batch(gen)
        inputs, labels = mask_tokens(ids, gen)
        out = model(input_ids=inputs, attention_mask=attention_mask, labels=labels)
        loss = out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())


def fmt(v):
    return f"{v:.4f}" if math.isfinite(v) else "nan"


first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
