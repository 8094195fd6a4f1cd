"""How close gradsight's own time is to the floor: the bare tensor work its statistics need.

    python benchmarks/floor.py [--models bert,demo,cnn] [--device cpu|cuda] [--steps 200] [--rounds 3]

For each model, in one process, blocks of steps alternate between:
- gradsight with its defaults and at full detail (``every=1``): the time inside its callbacks;
- a bare "norm floor": an optimizer pre-hook that only gathers ``p.grad`` and reads the fused
  per-gradient L2 norms to the host (what watching every step cannot go below);
- a bare "full floor": the norm floor, plus a global forward hook that only runs the reductions of
  an activation row on each module output (min/max, sum, sum of squares, non-zeros, and dead units
  of ReLU outputs) and, at the step, the gradients' sampled statistics (max, L1, zero counts, weight
  norms): the tensor work of full detail without gradsight's host-side processing.

Prints each one's time per step as a share of the plain step (median over rounds). The gap
between gradsight and its floor is host-side Python; the floor itself is what any tool computing
these statistics with PyTorch operations pays.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
from gradsight.runtime import activations as act  # noqa: E402
from gradsight.runtime import gradstats as gs  # noqa: E402
from gradsight.runtime.api import watch  # noqa: E402
from gradsight.runtime.layout import first_tensor  # noqa: E402
from overhead import IN_HOOKS, TASKS, _sync  # noqa: E402  (importing overhead installs the in-hook timers)

SPENT = [0.0]  # seconds inside the bare hooks


class Floor:
    """Bare hooks doing only the tensor work (``full``: the statistics of full detail too)."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, full: bool) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.flags = {id(m): act.module_flags(m) & (act._DEAD | act._NONNEG) for m in model.modules()}
        self.full = full
        self.last: torch.Tensor | None = None
        self.scratch: torch.Tensor | None = None  # as gradsight's work space for CPU rows
        self.handles = [opt.register_step_pre_hook(self._step)]
        if full:
            self.handles.append(torch.nn.modules.module.register_module_forward_hook(self._forward))

    def _step(self, opt: Any, args: Any, kwargs: Any) -> None:
        t0 = time.perf_counter()
        grads = [p.grad for p in self.params if p.grad is not None]
        torch.stack(torch._foreach_norm(grads)).cpu().numpy()
        if self.full:
            on_cpu = gs.all_on_cpu(grads)
            parts = [gs.max_abs(grads, on_cpu), gs.foreach_norm(grads, 1.0), gs.nonzero_counts(grads, on_cpu)]
            with torch.no_grad():
                parts.append(gs.foreach_norm(self.params, 2.0))
            torch.cat([p if isinstance(p, torch.Tensor) else torch.stack(p) for p in parts]).cpu().numpy()
        SPENT[0] += time.perf_counter() - t0

    def _forward(self, module: nn.Module, args: Any, output: Any) -> None:
        t0 = time.perf_counter()
        flags = self.flags.get(id(module))
        out = first_tensor(output)
        # (a container passing its last child's output on is not measured again, as in gradsight)
        if flags is not None and out is not None and out is not self.last and out.is_floating_point() and out.numel():
            flags = act.row_flags(flags, out.device)
            if not flags & act._MOMENTS:
                self.scratch = act.work_space(self.scratch, out.numel())
            act.activation_stats(module, flags, None, out, None, None if flags & act._MOMENTS else self.scratch)
        self.last = out
        SPENT[0] += time.perf_counter() - t0

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def block(task: Any, steps: int, device: str) -> float:
    """Mean seconds per step of a block."""
    t0 = time.perf_counter()
    for _ in range(steps):
        task.step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,demo,cnn")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dev = args.device
    print(f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}, {args.rounds} rounds x {args.steps} steps")
    print("own time per step as a share of the plain step (median over rounds)")
    print(f"{'model':8s} {'plain ms':>9s} {'norm floor':>11s} {'gradsight':>10s} {'full floor':>11s} {'full detail':>12s}")
    for name in args.models.split(","):
        task = TASKS[name](dev)
        block(task, 10, dev)
        shares: dict[str, list[float]] = {k: [] for k in ("norm floor", "gradsight", "full floor", "full detail")}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                plain = block(task, args.steps, dev)
                for mode in shares:
                    if "floor" in mode:
                        floor = Floor(task.model, task.opt, full=mode == "full floor")
                        SPENT[0] = 0.0
                        block(task, args.steps, dev)
                        floor.remove()
                        spent = SPENT[0]
                    else:
                        handle = watch(task.model, task.opt, store=Path(tmp) / f"{name}-{mode}-{r}.db",
                                       every=1 if mode == "full detail" else 100)
                        IN_HOOKS[0] = 0.0
                        block(task, args.steps, dev)
                        handle.close()
                        spent = IN_HOOKS[0]
                    shares[mode].append(spent / args.steps / plain)
        med = {k: statistics.median(v) for k, v in shares.items()}
        print(f"{name:8s} {plain * 1000:9.2f} {med['norm floor']:11.3f} {med['gradsight']:10.3f} {med['full floor']:11.3f} {med['full detail']:12.3f}")


if __name__ == "__main__":
    main()
