"""Fault: a vanilla RNN over long sequences with recurrent weights scaled up: gradients explode through time."""
import sys
import torch
from torch import nn
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import classification, regression, sequences  # noqa: E402,F401

EXPECTED = {"module": "rnn", "kind": "exploding_gradient"}


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 64, batch_first=True, nonlinearity="tanh")
        self.out = nn.Linear(64, 1)
        with torch.no_grad():
            nn.init.orthogonal_(self.rnn.weight_hh_l0)
            self.rnn.weight_hh_l0.mul_(2.0)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h[:, -1])


torch.manual_seed(0)
model = Seq()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
data = sequences(length=40)
for step in range(60):
    x, y = next(data)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y[:, -1])
    loss.backward()
    optimizer.step()
