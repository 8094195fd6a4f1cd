"""The demo: a small transformer language model on synthetic sequences, with a real fault.

The fault is a sign error in the optimizer's parameter groups: the embedding
group was meant to be exempt from weight decay but got ``-weight_decay``. SGD's
weight decay then *grows* the embedding weights each step, faster as the
learning rate warms up; the embedding output drifts out of range, and since the residual stream feeds
the LM head without a final LayerNorm, the head's logits and gradients explode
a few dozen steps later. Everything is seeded: the explosion comes at the same
step on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import nn

VOCAB = 48
SEQ = 24
D_MODEL = 48
HEADS = 4
LAYERS = 2
BATCH = 16
STEPS = 100
LR = 0.05
WEIGHT_DECAY = 0.3
WARMUP = 80


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.softmax = nn.Softmax(dim=-1)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, h, d // h).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = self.softmax(scores.masked_fill(causal, float("-inf")))
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(
            nn.Linear(d, 4 * d),
            nn.GELU(),
            nn.Linear(4 * d, d),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = VOCAB, d: int = D_MODEL, heads: int = HEADS, layers: int = LAYERS, seq: int = SEQ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def batches(seed: int = 0, batch: int = BATCH, seq: int = SEQ, vocab: int = VOCAB) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Synthetic sequences that follow a fixed rule (next = 5 * prev + 3 mod vocab), with 10% noise."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=gen)
        steps = torch.arange(seq + 1)
        seqs = [start]
        for _ in steps[1:]:
            seqs.append((seqs[-1] * 5 + 3) % vocab)
        data = torch.cat(seqs, dim=1)
        noise = torch.rand(data.shape, generator=gen) < 0.1
        data = torch.where(noise, torch.randint(0, vocab, data.shape, generator=gen), data)
        yield data[:, :-1], data[:, 1:]


def make_optimizer(model: TinyTransformer, lr: float = LR, weight_decay: float = WEIGHT_DECAY) -> torch.optim.Optimizer:
    embedding = list(model.embed.parameters())
    rest = [p for n, p in model.named_parameters() if not n.startswith("embed.")]
    return torch.optim.SGD(
        [
            {"params": rest, "weight_decay": 1e-4},
            # the fault: embeddings were meant to get no decay; the sign flip makes them grow each step
            {"params": embedding, "weight_decay": -weight_decay},
        ],
        lr=lr,
        momentum=0.9,
    )


def train(steps: int = STEPS, seed: int = 0, on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Train the demo model; returns the losses. ``on_step(step, loss)`` is called after each step."""
    torch.manual_seed(seed)
    model = TinyTransformer()
    optimizer = make_optimizer(model)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP))
    loss_fn = nn.CrossEntropyLoss()
    data = batches(seed)
    losses = []
    for step in range(steps):
        tokens, targets = next(data)
        optimizer.zero_grad()
        logits = model(tokens)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
    return losses


if __name__ == "__main__":
    for i, value in enumerate(train()):
        print(i, round(value, 3))
