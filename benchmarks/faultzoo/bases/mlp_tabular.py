"""Tabular MLP classifier.

Family: MLP with BatchNorm1d and Dropout, 6-class CrossEntropyLoss, Adam.
Style: module-level script with one small nn.Module class and manual
mini-batching over a shuffled index (torch.randperm), features standardised
with the training set's mean and std.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

N, D, C = 2048, 24, 6
BATCH = 64
EPOCHS = 5

# synthetic sensor readings: very different scales and offsets per column
latent = torch.randn(N, D)
W_true = torch.randn(D, C)
y = (latent @ W_true + 0.5 * torch.randn(N, C)).argmax(dim=1)  # zoo: targets var=y kind=class
scale = torch.logspace(-1, 2.5, D)
X = latent * scale + torch.linspace(-20.0, 300.0, D)  # zoo: inputs var=X
X = (X - X.mean(dim=0)) / X.std(dim=0)  # zoo: normalize


class TabularNet(nn.Module):
    def __init__(self, d_in, d_hidden, n_classes):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)  # zoo: layer name=fc1 init=1 relu=fc1 first=1
        self.bn1 = nn.BatchNorm1d(d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)  # zoo: layer name=fc2 init=1 relu=fc2 missing=1 frozen=1
        self.drop = nn.Dropout(0.1)  # zoo: dropout modules=drop,fc3
        self.fc3 = nn.Linear(d_hidden, n_classes)  # zoo: layer name=fc3 head=1 missing=1 init=1 new="nn.Linear(d_hidden, n_classes)"

    def forward(self, x):
        x = F.relu(self.bn1(self.fc1(x)))  # zoo: act var=x prev=fc1 next=fc2 | cut var=x upstream=fc1,bn1
        x = F.relu(self.fc2(x))  # zoo: act var=x prev=fc2 next=fc3 | skip module=fc2
        x = self.drop(x)
        return self.fc3(x)  # zoo: logits


model = TabularNet(D, 64, C)  # zoo: model var=model bn=bn1
criterion = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)  # zoo: optimizer var=optimizer kind=adam | lr value=3e-3

model.train()  # zoo: train_mode
for epoch in range(EPOCHS):  # zoo: loop
    perm = torch.randperm(N)
    running = 0.0
    for i in range(0, N, BATCH):
        idx = perm[i:i + BATCH]
        xb, yb = X[idx], y[idx]
        optimizer.zero_grad()  # zoo: zero_grad
        logits = model(xb)  # zoo: forward
        loss = criterion(logits, yb)  # zoo: loss kind=ce pred=logits target=yb classes=C
        loss.backward()  # zoo: backward
        optimizer.step()  # zoo: step per=batch
        running += loss.item()
    print(f"epoch {epoch}: loss {running / (N // BATCH):.4f}")

with torch.no_grad():
    model.eval()
    acc = (model(X).argmax(1) == y).float().mean().item()
print(f"train accuracy {acc:.3f}")
