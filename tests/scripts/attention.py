"""A small attention model whose head 1 collapses: at step 15 its query weights are scaled up 80x, so that head puts
nearly all its attention on one token and the loss jumps (the anomaly that captures the attention maps)."""

import math

import torch
from torch import nn

VOCAB, SEQ, D, HEADS = 32, 12, 32, 4


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(D, D)
        self.key = nn.Linear(D, D)
        self.value = nn.Linear(D, D)
        self.softmax = nn.Softmax(dim=-1)
        self.out = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, HEADS, D // HEADS).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        weights = self.softmax(q @ k.transpose(-2, -1) / math.sqrt(D // HEADS))
        return self.out((weights @ v).transpose(1, 2).reshape(b, t, D))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.attn = SelfAttention()
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        x = x + self.attn(x)
        return self.head(self.norm(x))


torch.manual_seed(0)
model = TinyLM()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(30):
    tokens = torch.randint(0, VOCAB, (8, SEQ))
    if step == 15:
        with torch.no_grad():  # head 1's queries blow up: its softmax saturates on one key
            model.attn.query.weight[8:16].mul_(80.0)
            model.attn.query.bias[8:16].mul_(80.0)
            model.head.weight.mul_(30.0)  # and the logits with it: the loss spikes
    optimizer.zero_grad()
    logits = model(tokens)
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
