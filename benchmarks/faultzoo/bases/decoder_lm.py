"""Small decoder-only language model with a causal mask (own nn.Module).

Family: decoder-only transformer (token + learned positions, 2 pre-norm blocks
with nn.MultiheadAttention under a boolean causal attn_mask, ReLU MLP, a linear
output head), next-token CrossEntropyLoss over a vocabulary of 16, AdamW.
Style: nanoGPT-like classes (`Block`, `TinyLM` with `generate`-free
`forward(idx, targets)` returning the loss), a `get_batch()` helper, a
`train()` loop with periodic logging. Data: repeated random phrases.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, BLOCK, N_EMBD, N_HEAD, N_LAYER = 16, 12, 32, 2, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(N_EMBD)
        self.attn = nn.MultiheadAttention(N_EMBD, N_HEAD, batch_first=True)
        self.ln2 = nn.LayerNorm(N_EMBD)
        self.mlp = nn.Sequential(nn.Linear(N_EMBD, 4 * N_EMBD), nn.ReLU(), nn.Linear(4 * N_EMBD, N_EMBD))

    def forward(self, x, mask):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, N_EMBD)  # zoo: layer name=tok_emb first=1 frozen=1
        self.pos_emb = nn.Embedding(BLOCK, N_EMBD)
        self.blocks = nn.ModuleList([Block() for _ in range(N_LAYER)])  # zoo: layer name=blocks.1 missing=1 | layer name=blocks.0 frozen=1 missing=1
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.head = nn.Linear(N_EMBD, VOCAB, bias=False)  # zoo: layer name=head head=1 missing=1 new="nn.Linear(N_EMBD, VOCAB, bias=False)"

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # zoo: mask kind=causal var=mask
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.ln_f(x))  # zoo: logits
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))  # zoo: loss kind=lm pred=logits target=targets fn=1
        return logits, loss


def get_batch(g, batch=16):
    phrase = torch.randint(0, VOCAB, (batch, BLOCK // 2 + 1), generator=g)
    data = torch.cat([phrase, phrase], dim=1)[:, :BLOCK + 1]
    return data[:, :-1], data[:, 1:]


def train(steps=150, lr=5e-3):  # zoo: lr value=5e-3
    torch.manual_seed(1337)
    g = torch.Generator().manual_seed(1337)
    model = TinyLM()  # zoo: model var=model attn=blocks.0.attn,blocks.1.attn
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)  # zoo: optimizer var=optimizer kind=adamw
    for it in range(steps):  # zoo: loop
        xb, yb = get_batch(g)  # zoo: batch x=xb y=yb
        logits, loss = model(xb, yb)  # zoo: forward ids=1
        optimizer.zero_grad(set_to_none=True)  # zoo: zero_grad
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        if it % 30 == 0 or it == steps - 1:
            print(f"iter {it}: loss {loss.item():.4f}")


if __name__ == "__main__":
    train()
