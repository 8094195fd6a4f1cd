"""Healthy probe 11: a 4-layer Hugging Face BertModel from a config with a pooled head of its own, a padding
mask, torch's LinearLR warmup then constant, AdamW, no clipping, and an evaluation pass under no_grad per epoch."""
import torch
from torch import nn
from transformers import BertConfig, BertModel

torch.manual_seed(1)
VOCAB, PAD, CLS = 64, 0, 1


def batch(n, g):
    lens = torch.randint(6, 20, (n,), generator=g)
    ids = torch.randint(3, VOCAB, (n, 20), generator=g)
    mask = (torch.arange(20)[None, :] < lens[:, None]).long()
    ids = ids * mask + PAD * (1 - mask)
    ids[:, 0] = CLS
    # the class: which of three marker tokens appears first
    y = torch.randint(0, 3, (n,), generator=g)
    at = (torch.rand(n, generator=g) * (lens - 2).float()).long() + 1
    ids[torch.arange(n), at] = 3 + y
    return ids, mask, y


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        cfg = BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=4, num_attention_heads=4,
                         intermediate_size=96, max_position_embeddings=32, pad_token_id=PAD)
        self.encoder = BertModel(cfg, add_pooling_layer=False)
        self.head = nn.Linear(48, 3)

    def forward(self, ids, mask):
        h = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return self.head(pooled)


g = torch.Generator().manual_seed(1)
train = [batch(32, g) for _ in range(40)]
val = batch(256, g)
model = Classifier()
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.05, total_iters=40)
loss_fn = nn.CrossEntropyLoss()
losses = []
for epoch in range(5):
    model.train()
    for ids, mask, y in train:
        loss = loss_fn(model(ids, mask), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        acc = (model(val[0], val[1]).argmax(1) == val[2]).float().mean().item()
    print(f"epoch {epoch} loss {loss.item():.4f} val acc {acc:.3f}")
print(f"initial loss {sum(losses[:5]) / 5:.4f} final loss {sum(losses[-5:]) / 5:.4f} steps {len(losses)}")
