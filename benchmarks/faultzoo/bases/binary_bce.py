"""Binary classifier (fraud-style tabular data) with BCEWithLogitsLoss.

Family: MLP binary classifier with LeakyReLU and Dropout, one logit per row,
BCEWithLogitsLoss, Adam, StepLR stepped once per epoch.
Style: a map-style Dataset subclass, DataLoader, `train_one_epoch()` and
`evaluate()` helpers, a `if __name__ == "__main__":` block.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class TransactionsDataset(Dataset):
    def __init__(self, n=1536, d=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, d, generator=g)
        w = torch.randn(d, generator=g)
        score = self.x @ w + 0.8 * self.x[:, 0] * self.x[:, 1]
        self.y = (score + 0.3 * torch.randn(n, generator=g) > 0).float()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class FraudNet(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.hidden = nn.Linear(d, 32)  # zoo: layer name=hidden first=1 init=1 missing=1 frozen=1
        self.act = nn.LeakyReLU(0.01)
        self.dropout = nn.Dropout(0.1)  # zoo: dropout modules=dropout,out
        self.out = nn.Linear(32, 1)  # zoo: layer name=out head=1 missing=1 new="nn.Linear(32, 1)"

    def forward(self, x):
        h = self.act(self.hidden(x))  # zoo: cut var=h upstream=hidden
        h = self.dropout(h)
        return self.out(h).squeeze(-1)  # zoo: logits


def train_one_epoch(model, loader, criterion, optimizer):
    model.train()  # zoo: train_mode
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()  # zoo: zero_grad
        logits = model(x)  # zoo: forward
        loss = criterion(logits, y)  # zoo: loss kind=bce pred=logits target=y
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        total += loss.item() * len(y)
    return total / len(loader.dataset)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = sum(((model(x) > 0).float() == y).sum().item() for x, y in loader)
    return correct / len(loader.dataset)


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(TransactionsDataset(), batch_size=64, shuffle=True)
    model = FraudNet(16)  # zoo: model var=model
    criterion = nn.BCEWithLogitsLoss()  # zoo: criterion kind=bce
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)  # zoo: optimizer var=optimizer kind=adam | lr value=5e-3
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)  # zoo: sched var=scheduler per=epoch
    for epoch in range(8):  # zoo: loop
        loss = train_one_epoch(model, loader, criterion, optimizer)
        scheduler.step()  # zoo: sched_step per=epoch
        print(f"epoch {epoch}: loss {loss:.4f} acc {evaluate(model, loader):.3f}")
