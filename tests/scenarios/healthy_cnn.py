"""Healthy: a small CNN with BatchNorm on synthetic images (the class is the brightest quadrant)."""
import torch
from torch import nn

EXPECTED = None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(16 * 4 * 4, 4)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.bn2(self.conv2(x))))
        return self.head(x.flatten(1))


torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(0)
for step in range(120):
    y = torch.randint(0, 4, (32,), generator=g)
    x = torch.randn(32, 1, 16, 16, generator=g) * 0.5
    for i in range(32):
        r, c = divmod(int(y[i]), 2)
        x[i, 0, r * 8:(r + 1) * 8, c * 8:(c + 1) * 8] += 1.0
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
