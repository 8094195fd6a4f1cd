"""Two training phases in one script: a teacher, then a student distilled from it."""
import torch
from torch import nn
torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(teacher.parameters(), lr=0.01)
for step in range(20):
    x = torch.randn(16, 8); loss = (teacher(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
student = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
opt2 = torch.optim.SGD(student.parameters(), lr=0.01)
for step in range(15):
    x = torch.randn(16, 8)
    with torch.no_grad(): t = teacher(x)
    loss = (student(x) - t).pow(2).mean()
    opt2.zero_grad(); loss.backward(); opt2.step()
print("done")
