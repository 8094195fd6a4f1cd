"""Fault: the model ends in Softmax and is trained with CrossEntropyLoss, which applies log-softmax again."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": ["net.3", "loss"], "kind": "double_softmax"}  # the softmax module, or the loss it feeds


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5), nn.Softmax(dim=1))

    def forward(self, x):
        return self.net(x)


torch.manual_seed(0)
model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
data = classification()
for step in range(100):
    x, y = next(data)
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
