"""A custom autograd.Function whose backward divides by zero: inf gradients made inside the module 'act'."""
import torch
from torch import nn
class BadGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / (x > 0).float()  # inf where x <= 0: a wrong gradient
class Clamp(nn.Module):
    def forward(self, x):
        return BadGrad.apply(x)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.act = Clamp()
        self.fc2 = nn.Linear(32, 32)
        self.out = nn.Linear(32, 1)
    def forward(self, x):
        return self.out(torch.relu(self.fc2(self.act(self.fc1(x)))))
torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(12):
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
