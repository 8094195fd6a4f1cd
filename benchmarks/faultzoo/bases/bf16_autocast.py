"""MLP classifier trained under CPU bf16 autocast.

Family: MLP with LayerNorm and SiLU (residual hidden block), 8-class
CrossEntropyLoss, AdamW; the forward and the loss run inside
`torch.autocast("cpu", dtype=torch.bfloat16)`, the weights stay float32.
Style: a `main()` with a `for epoch ... for batch` loop over a DataLoader,
a small `evaluate()`; mixed precision as the PyTorch AMP recipe writes it.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class ResidualMLP(nn.Module):
    def __init__(self, d_in, width, n_classes):
        super().__init__()
        self.inp = nn.Linear(d_in, width)  # zoo: layer name=inp first=1 frozen=1 missing=1
        self.norm = nn.LayerNorm(width)
        self.hidden = nn.Linear(width, width)  # zoo: layer name=hidden missing=1
        self.act = nn.SiLU()
        self.cls = nn.Linear(width, n_classes)  # zoo: layer name=cls head=1 missing=1 new="nn.Linear(64, 8)"

    def forward(self, x):
        h = self.act(self.norm(self.inp(x)))
        h = h + self.act(self.hidden(h))
        return self.cls(h)  # zoo: logits


def main():
    torch.manual_seed(0)
    n, d, classes = 2048, 32, 8
    x = torch.randn(n, d)  # zoo: inputs var=x sparse=1
    centers = torch.randn(classes, d) * 1.2
    y = torch.cdist(x, centers).argmin(dim=1)  # zoo: targets var=y kind=class
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
    model = ResidualMLP(d, 64, classes)  # zoo: model var=model
    criterion = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)  # zoo: optimizer var=optimizer kind=adamw
    for epoch in range(8):  # zoo: loop
        model.train()  # zoo: train_mode
        for xb, yb in loader:
            optimizer.zero_grad()  # zoo: zero_grad
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(xb)  # zoo: forward
                loss = criterion(logits, yb)  # zoo: loss kind=ce pred=logits target=yb classes=classes
            loss.backward()  # zoo: backward
            optimizer.step()  # zoo: step per=batch
        print(f"epoch {epoch}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
