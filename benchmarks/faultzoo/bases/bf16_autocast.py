"""MLP classifier of small flattened uint8 images trained under CPU bf16 autocast.

Family: MLP with SiLU and a residual hidden block, 8-class
CrossEntropyLoss, SGD with momentum; the forward and the loss run inside
`torch.autocast("cpu", dtype=torch.bfloat16)`, the weights stay float32.
Style: a `main()` with a `for epoch ... for batch` loop over a DataLoader;
mixed precision as the PyTorch AMP recipe writes it; pixels scaled by 1/255.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class PixelMLP(nn.Module):
    def __init__(self, d_in, width, n_classes):
        super().__init__()
        self.inp = nn.Linear(d_in, width)  # zoo: layer name=inp first=1 frozen=1 missing=1 init=1
        self.hidden = nn.Linear(width, width)  # zoo: layer name=hidden missing=1 frozen=1
        self.act = nn.SiLU()
        self.cls = nn.Linear(width, n_classes)  # zoo: layer name=cls head=1 missing=1 new="nn.Linear(64, 8)"

    def forward(self, x):
        h = self.act(self.inp(x))
        h = h + self.act(self.hidden(h))
        return self.cls(h)  # zoo: logits


def main():
    torch.manual_seed(0)
    n, d, classes = 2048, 64, 8
    g = torch.Generator().manual_seed(0)
    templates = torch.rand(classes, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)  # zoo: targets var=y kind=class
    images = ((0.35 * templates[y] + 0.65 * torch.rand(n, d, generator=g)) * 255).to(torch.uint8)  # 8x8 grey images, flattened
    x = images.float() / 255.0  # zoo: pixels
    loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
    model = PixelMLP(d, 64, classes)  # zoo: model var=model
    criterion = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # zoo: optimizer var=optimizer kind=sgd | lr value=0.05
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
