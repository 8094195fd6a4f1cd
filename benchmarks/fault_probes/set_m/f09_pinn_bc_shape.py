import math

import torch
import torch.nn as nn

torch.manual_seed(0)

# Solve u''(x) = -pi^2 sin(pi x) on [-1, 1], u(-1) = -1, u(1) = 1.
# Exact solution: u(x) = sin(pi x) + x.
PI = math.pi


def source(x):
    return -PI ** 2 * torch.sin(PI * x)


model = nn.Sequential(
    nn.Linear(1, 32), nn.Tanh(),
    nn.Linear(32, 32), nn.Tanh(),
    nn.Linear(32, 32), nn.Tanh(),
    nn.Linear(32, 1),
)
for m in model.modules():
    if isinstance(m, nn.Linear):
        nn.init.xavier_normal_(m.weight)
        nn.init.zeros_(m.bias)


def second_derivative(u_fn, x):
    x = x.requires_grad_(True)
    u = u_fn(x)
    du = torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), create_graph=True)[0]
    d2u = torch.autograd.grad(du, x, grad_outputs=torch.ones_like(du), create_graph=True)[0]
    return u, d2u


def pinn_loss(u_fn, x_col, x_bc, u_bc):
    _, d2u = second_derivative(u_fn, x_col)
    residual = d2u - source(x_col)
    loss_res = residual.pow(2).mean()
    loss_bc = (u_fn(x_bc) - u_bc).pow(2).mean()
    return loss_res + loss_bc


x_bc = torch.tensor([[-1.0], [1.0]])
u_bc = torch.tensor([-1.0, 1.0])

optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)

losses = []
for step in range(300):
    x_col = torch.rand(128, 1) * 2.0 - 1.0
    optimizer.zero_grad()
    loss = pinn_loss(model, x_col, x_bc, u_bc)
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())


def fmt(v):
    m = sum(v) / len(v)
    return f"{m:.4f}" if math.isfinite(m) else "nan"


print(f"initial loss {fmt(losses[:5])} final loss {fmt(losses[-5:])} steps {len(losses)}")
