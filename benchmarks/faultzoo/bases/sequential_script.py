"""Module-level nn.Sequential classifier: the shortest script people write.

Family: MLP (nn.Sequential of Linear/ReLU), 5-class CrossEntropyLoss, SGD with
momentum.
Style: no functions and no classes at all; `model = nn.Sequential(...)` at
module level, full-batch tensors sliced by hand, a print every 20 steps.
"""
import torch
from torch import nn

torch.manual_seed(42)

X = torch.randn(1500, 32)  # zoo: inputs var=X sparse=1
W = torch.randn(32, 5)
y = torch.argmax(X @ W + 0.5 * torch.tanh(X[:, :5] * 3), dim=1)  # zoo: targets var=y kind=class

model = nn.Sequential(  # zoo: model var=model relu=1,3
    nn.Linear(32, 128),  # zoo: layer name=0 first=1 init=1 relu=0,1 frozen=1 missing=1
    nn.ReLU(),
    nn.Linear(128, 64),  # zoo: layer name=2 init=1 relu=2,3 missing=1 frozen=1
    nn.ReLU(),
    nn.Linear(64, 5),  # zoo: layer name=4 head=1 missing=1 new="nn.Linear(64, 5)" seq=1
)  # zoo: sequential_end
loss_fn = nn.CrossEntropyLoss()  # zoo: criterion kind=ce
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # zoo: optimizer var=opt kind=sgd | lr value=0.05

for step in range(150):  # zoo: loop
    i = (step * 50) % 1500
    xb, yb = X[i:i + 50], y[i:i + 50]
    opt.zero_grad()  # zoo: zero_grad
    out = model(xb)  # zoo: forward
    loss = loss_fn(out, yb)  # zoo: loss kind=ce pred=out target=yb classes=5
    loss.backward()  # zoo: backward
    opt.step()  # zoo: step per=batch
    if step % 20 == 0:
        print(step, loss.item())
