"""A small MLP regression run with one fault injected at a chosen step (used by the tests).

    python faults.py --fault NAME --at K [--steps N] [--argv-out FILE] [--exit CODE]
"""

import argparse
import json
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(64, 32)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.act2(self.fc2(self.act(self.fc1(x)))))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fault", default="none",
                    choices=["none", "loss_spike", "grad_explode", "nan_inf", "dead_units", "vanishing"])
    ap.add_argument("--at", type=int, default=30)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--argv-out")
    ap.add_argument("--exit", type=int, default=0)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    if args.argv_out:
        with open(args.argv_out, "w") as fh:
            json.dump({"argv": sys.argv, "name": __name__, "path0": sys.path[0]}, fh)
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    w = torch.randn(16, 1)
    for step in range(args.steps):
        x = torch.randn(32, 16)
        y = x @ w + 0.1 * torch.randn(32, 1)
        if step == args.at:
            if args.fault == "loss_spike":
                y = y * 20  # a corrupted batch of targets
            elif args.fault == "grad_explode":
                x = x * 1e3  # an unnormalised batch
            elif args.fault == "nan_inf":
                x[0, 0] = float("nan")
            elif args.fault == "dead_units":
                with torch.no_grad():
                    model.fc1.bias.fill_(-1e3)
            elif args.fault == "vanishing":
                with torch.no_grad():
                    model.out.weight.mul_(1e-9)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if args.sleep:
            import time

            time.sleep(args.sleep)
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
