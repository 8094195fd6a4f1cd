import math
import torch
from transformers import T5Config, T5ForConditionalGeneration

torch.manual_seed(0)

PAD, EOS = 0, 1
VOCAB = 24
SRC_MAX = 8
BATCH = 32
STEPS = 200


def make_batch(gen):
    lengths = torch.randint(4, SRC_MAX + 1, (BATCH,), generator=gen)
    src = torch.full((BATCH, SRC_MAX + 1), PAD, dtype=torch.long)
    tgt = torch.full((BATCH, SRC_MAX + 1), PAD, dtype=torch.long)
    for i in range(BATCH):
        L = int(lengths[i])
        seq = torch.randint(2, VOCAB, (L,), generator=gen)
        src[i, :L] = seq
        src[i, L] = EOS
        tgt[i, :L] = seq.sort().values
        tgt[i, L] = EOS
    attention_mask = (src != PAD).long()
    labels = tgt.clone()
    labels[labels == PAD] = -100
    return src, attention_mask, labels


config = T5Config(
    vocab_size=VOCAB,
    d_model=64,
    d_kv=16,
    d_ff=128,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    dropout_rate=0.1,
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
)
model = T5ForConditionalGeneration(config)
model.shared.weight.requires_grad = False
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

gen = torch.Generator().manual_seed(1)
losses = []
model.train()
for step in range(STEPS):
    input_ids, attention_mask, labels = make_batch(gen)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    loss = out.loss
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())

first = sum(losses[:5]) / 5
last = sum(losses[-5:]) / 5
fmt = lambda v: f"{v:.4f}" if math.isfinite(v) else "nan"
print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")
