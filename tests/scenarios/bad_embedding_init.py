"""Fault: a text classifier whose embedding is initialised with std 100 instead of ~1 (or 0.02)."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "embed", "kind": "poor_initialization"}


class BagOfWords(nn.Module):
    def __init__(self, vocab: int = 100, d: int = 32, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.hidden = nn.Linear(d, 32)
        self.out = nn.Linear(32, classes)
        nn.init.normal_(self.embed.weight, std=100.0)

    def forward(self, tokens):
        return self.out(torch.tanh(self.hidden(self.embed(tokens).mean(dim=1))))


torch.manual_seed(0)
model = BagOfWords()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
for step in range(100):
    tokens = torch.randint(0, 100, (32, 12), generator=g)
    labels = tokens[:, 0] % 4
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(tokens), labels)
    loss.backward()
    optimizer.step()
