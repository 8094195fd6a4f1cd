"""Functional regression network: no nn.Module subclass, no nn.Linear.

Family: MLP regression (3 affine layers, tanh and GELU), MSELoss, SGD with
Nesterov momentum.
Style: functional. The parameters live in an nn.ModuleDict of
nn.ParameterDict (one per layer) so that one object owns them; the forward is
a plain function over that dict using torch.nn.functional; hand-rolled
initialisation; a `train()` function with keyword arguments.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def init_params(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    layers = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        bound = 1.0 / math.sqrt(fan_in)
        layers[f"layer{i}"] = nn.ParameterDict({
            "weight": nn.Parameter((torch.rand(fan_out, fan_in, generator=g) * 2 - 1) * bound),
            "bias": nn.Parameter(torch.zeros(fan_out)),
        })
    return nn.ModuleDict(layers)


def forward(params, x, training=True):
    h = torch.tanh(F.linear(x, params["layer0"]["weight"], params["layer0"]["bias"]))  # zoo: act var=h prev=layer0 next=layer1 training=training fn=tanh | cut var=h upstream=layer0
    h = F.gelu(F.linear(h, params["layer1"]["weight"], params["layer1"]["bias"]))  # zoo: act var=h prev=layer1 next=layer2 training=training fn=gelu | cut var=h upstream=layer0,layer1 | skip module=layer1
    return F.linear(h, params["layer2"]["weight"], params["layer2"]["bias"])  # zoo: logits


def make_data(n, d, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, 1, generator=g)
    y = torch.sin(x @ w) + 0.5 * (x[:, :1] * x[:, 1:2]) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def train(steps=200, batch=64, lr=0.05, width=64):  # zoo: lr value=0.05
    torch.manual_seed(0)
    x, y = make_data(2048, 8)
    params = init_params([8, width, width, 1])  # zoo: model var=params functional=1 | layer name=layer0 first=1 init=1 sat=1 frozen=1 | layer name=layer1 init=1 missing=1 | layer name=layer2 head=1 missing=1
    opt = torch.optim.SGD(params.parameters(), lr=lr, momentum=0.9, nesterov=True)  # zoo: optimizer var=opt kind=sgd
    loss_fn = nn.MSELoss()  # zoo: criterion kind=mse
    for step in range(steps):  # zoo: loop
        idx = torch.randint(0, len(x), (batch,))
        xb, yb = x[idx], y[idx]
        pred = forward(params, xb)  # zoo: forward
        loss = loss_fn(pred, yb)  # zoo: loss kind=mse pred=pred target=yb
        opt.zero_grad()  # zoo: zero_grad
        loss.backward()  # zoo: backward
        opt.step()  # zoo: step per=batch
        if step % 40 == 0:
            print(f"step {step}: mse {loss.item():.4f}")
    return params


if __name__ == "__main__":
    train()
