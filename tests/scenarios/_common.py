"""Small synthetic data shared by the scenarios (kept tiny: each scenario trains in a second or two)."""

import torch


def regression(n: int = 64, d: int = 16, seed: int = 0, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, 1, generator=g)
    while True:
        x = torch.randn(n, d, generator=g)
        yield x * scale, x @ w + 0.1 * torch.randn(n, 1, generator=g)


def classification(n: int = 64, d: int = 20, classes: int = 5, seed: int = 0, noise: float = 0.0):
    """Classes separable by a fixed linear map; ``noise`` of the labels replaced at random."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, classes, generator=g)
    while True:
        x = torch.randn(n, d, generator=g)
        y = (x @ w).argmax(dim=1)
        flip = torch.rand(n, generator=g) < noise
        y = torch.where(flip, torch.randint(0, classes, (n,), generator=g), y)
        yield x, y


def sequences(n: int = 32, length: int = 20, d: int = 8, seed: int = 0):
    """Predict the running mean of a random sequence's first feature."""
    g = torch.Generator().manual_seed(seed)
    while True:
        x = torch.randn(n, length, d, generator=g)
        yield x, x[:, :, :1].cumsum(dim=1) / torch.arange(1, length + 1).view(1, -1, 1)
