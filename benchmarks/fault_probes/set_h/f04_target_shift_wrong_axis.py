"""Tiny decoder-only language model on a synthetic order-2 Markov corpus."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

VOCAB = 16
SEQ_LEN = 32          # tokens fed to the model
BLOCK_SIZE = 64       # size of the causal mask buffer
D_MODEL = 64
N_HEAD = 4
N_LAYER = 2
BATCH = 32
EPOCHS = 6
LR = 1e-2
WEIGHT_DECAY = 0.1
WARMUP = 20


def make_corpus(n_seq, gen):
    """Order-2 Markov text: the next token is a fixed function of the previous two, 10% noise."""
    table = torch.randint(0, VOCAB, (VOCAB, VOCAB), generator=gen)
    seqs = torch.empty(n_seq, SEQ_LEN + 1, dtype=torch.long)
    seqs[:, :2] = torch.randint(0, VOCAB, (n_seq, 2), generator=gen)
    for t in range(2, SEQ_LEN + 1):
        nxt = table[seqs[:, t - 2], seqs[:, t - 1]]
        noise = torch.rand(n_seq, generator=gen) < 0.1
        nxt[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=gen)
        seqs[:, t] = nxt
    return seqs


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_head, block_size):
        super().__init__()
        assert d_model % n_head == 0
        self.n_head = n_head
        self.head_dim = d_model // n_head
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.register_buffer(
            "mask", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
        )

    def forward(self, x):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.out_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d_model, n_head, block_size):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, block_size)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab, d_model, n_head, n_layer, block_size):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)[None]
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def configure_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": WEIGHT_DECAY},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.95))


def main():
    gen = torch.Generator().manual_seed(1)
    data = make_corpus(800, gen)
    steps_per_epoch = data.shape[0] // BATCH
    total_steps = EPOCHS * steps_per_epoch

    model = TinyGPT(VOCAB, D_MODEL, N_HEAD, N_LAYER, BLOCK_SIZE)
    optimizer = configure_optimizer(model)

    def lr_lambda(step):
        if step < WARMUP:
            return (step + 1) / WARMUP
        progress = min(1.0, (step - WARMUP) / max(1, total_steps - WARMUP))
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    losses = []
    step = 0
    for epoch in range(EPOCHS):
        perm = torch.randperm(data.shape[0])
        model.train()
        for i in range(steps_per_epoch):
            batch = data[perm[i * BATCH:(i + 1) * BATCH]]
            x, y = batch[:-1], batch[1:]
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            step += 1
        print(f"epoch {epoch} step {step} loss {sum(losses[-steps_per_epoch:]) / steps_per_epoch:.4f} "
              f"lr {scheduler.get_last_lr()[0]:.2e}")

    def fmt(v):
        return f"{v:.4f}" if math.isfinite(v) else "nan"

    first = sum(losses[:5]) / 5
    last = sum(losses[-5:]) / 5
    print(f"initial loss {fmt(first)} final loss {fmt(last)} steps {len(losses)}")


if __name__ == "__main__":
    main()
