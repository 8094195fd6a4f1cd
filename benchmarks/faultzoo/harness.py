"""Run one training script plainly (no gradsight) and record what it did.

    python harness.py SCRIPT OUT.json

The script runs under runpy as ``__main__`` with ``sys.argv = [SCRIPT]``. Two global hooks
record it: ``torch.autograd.backward`` (which ``Tensor.backward`` calls) keeps the value of
each scalar it is asked to differentiate, and a global optimizer step hook closes a step:
a step's loss is the sum of the backward values since the previous step (the mean of the
micro-batch losses when a loop divides each by the accumulation count). At the first step
the root model is found (the module object holding most of the optimizer's parameters,
the outermost on a tie) and its ``named_modules()`` names are kept, so the benchmark can
check that every expected module name exists. Per module it also records how many steps
its parameters had no (or an all-zero) gradient, and whether its parameters changed by
the end. Nothing here is imported by the scripts under test.
"""

from __future__ import annotations

import gc
import json
import math
import runpy
import sys
import time
import traceback
import warnings

import torch
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook


class Recorder:
    def __init__(self) -> None:
        self.pending: list[float] = []
        self.losses: list[float | None] = []
        self.n_backward = 0
        self.root: nn.Module | None = None
        self.modules: list[str] = []
        self.param_module: dict[int, str] = {}
        self.initial: dict[int, torch.Tensor] = {}
        self.params: dict[int, torch.Tensor] = {}
        self.no_grad_steps: dict[str, int] = {}
        self.lrs: list[float] = []
        self.backward_losses: list[float] = []  # every backward's value: the losses of a run that never steps

    def backward(self, tensors) -> None:
        t = tensors[0] if isinstance(tensors, (tuple, list)) and tensors else tensors
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            self.pending.append(float(t.detach().float()))
            self.backward_losses.append(self.pending[-1])
        self.n_backward += 1

    def adopt(self, optimizer: torch.optim.Optimizer) -> None:
        owned = {id(p) for g in optimizer.param_groups for p in g["params"]}
        best, best_key = None, (-1, -1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            candidates = [obj for obj in gc.get_objects() if isinstance(obj, nn.Module)]
        for obj in candidates:
            try:
                ids = [id(p) for p in obj.parameters()]
            except Exception:
                continue
            key = (sum(1 for i in ids if i in owned), sum(1 for _ in obj.modules()))
            if key > best_key:
                best, best_key = obj, key
        self.root = best
        if best is not None:
            for name, mod in best.named_modules():
                self.modules.append(name)
                for p in mod.parameters(recurse=False):
                    self.param_module[id(p)] = name
        for g in optimizer.param_groups:
            for p in g["params"]:
                self.params[id(p)] = p
                self.initial[id(p)] = p.detach().clone()

    def pre_step(self, optimizer, args, kwargs) -> None:
        if self.root is None and not self.params:
            self.adopt(optimizer)
        empty: set[str] = set()
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.grad is None or not bool(p.grad.detach().ne(0).any()):
                    empty.add(self.param_module.get(id(p), "?"))
        for name in empty:
            self.no_grad_steps[name] = self.no_grad_steps.get(name, 0) + 1
        self.lrs.append(float(optimizer.param_groups[0]["lr"]))

    def post_step(self, optimizer, args, kwargs) -> None:
        self.losses.append(sum(self.pending) if self.pending else None)
        self.pending = []

    def report(self) -> dict:
        unchanged: set[str] = set()
        changed: set[str] = set()
        for i, p in self.params.items():
            name = self.param_module.get(i, "?")
            same = p.shape == self.initial[i].shape and bool(torch.equal(p.detach().to(self.initial[i].dtype), self.initial[i]))
            (unchanged if same else changed).add(name)
        # a loop that never calls step() (the fault is the missing call) is judged on each backward's loss
        losses = list(self.losses) if self.losses else list(self.backward_losses)
        return {
            "losses": losses,
            "stepless": not self.losses and bool(self.backward_losses),
            "finite": all(math.isfinite(v) for v in losses if v is not None),
            "n_steps": len(self.losses),
            "n_backward": self.n_backward,
            "modules": self.modules,
            "no_grad_steps": self.no_grad_steps,
            "unchanged_modules": sorted(unchanged - changed),
            "param_modules": sorted(unchanged | changed),
            "lr_first_last": [self.lrs[0], self.lrs[-1]] if self.lrs else None,
            "lr_max": max(self.lrs) if self.lrs else None,
        }


def record(script: str) -> dict:
    """Run `script` as __main__ in this process with the recording hooks installed; return the record.

    The hooks stay installed afterwards: call it in a process of its own (the manifest forks one per run).
    """
    rec = Recorder()
    original = torch.autograd.backward

    def backward(tensors, *a, **k):
        rec.backward(tensors)
        return original(tensors, *a, **k)

    torch.autograd.backward = backward
    register_optimizer_step_pre_hook(rec.pre_step)
    register_optimizer_step_post_hook(rec.post_step)
    sys.argv = [script]
    t0 = time.perf_counter()
    error = None
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            error = f"SystemExit({e.code})"
    except BaseException as e:  # a crash is recorded, not raised: it is evidence
        tb = traceback.format_exc().strip().splitlines()
        error = f"{type(e).__name__}: {str(e)[:300]}" + " | " + " ".join(t.strip() for t in tb[-3:-1])[:300]
    result = rec.report()
    result["error"] = error
    result["seconds"] = round(time.perf_counter() - t0, 2)
    result["losses"] = [v if v is None or math.isfinite(v) else str(v) for v in result["losses"]]
    return result


def main() -> int:
    script, out = sys.argv[1], sys.argv[2]
    result = record(script)
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
