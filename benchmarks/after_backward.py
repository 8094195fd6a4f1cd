"""The floor of the per-step hook: reading the gradients right after the backward, twice.

    python benchmarks/after_backward.py [--models demo,bert,cnn] [--steps 100]

Plain training (no gradsight); an optimizer pre-step hook, where gradsight's step hook runs,
times the same work twice in a row: gathering ``p.grad`` of every parameter, then their fused
norms (``torch._foreach_norm`` + ``stack``). The first time is what a step hook pays (caches
cold after the backward), the second what the same code costs warm, which is what microbenchmarks
of it in a loop report. Prints the medians in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
from overhead import TASKS  # noqa: E402


def measure(name: str, steps: int) -> None:
    task = TASKS[name]("cpu")
    params = [p for p in task.model.parameters() if p.requires_grad]
    times: dict[str, list[float]] = {}

    def pre(opt: Any, a: Any, k: Any) -> None:
        for rep in ("first", "again"):
            t0 = time.perf_counter()
            grads = [p.grad for p in params]
            t1 = time.perf_counter()
            torch.stack(torch._foreach_norm([g for g in grads if g is not None]))
            t2 = time.perf_counter()
            times.setdefault(f"gather {rep}", []).append(t1 - t0)
            times.setdefault(f"norms {rep}", []).append(t2 - t1)

    handle = task.opt.register_step_pre_hook(pre)
    for _ in range(steps):
        task.step()
    handle.remove()
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"{name} ({len(params)} tensors): gather p.grad {med['gather first']:.0f} (again {med['gather again']:.0f}); "
          f"fused norms {med['norms first']:.0f} (again {med['norms again']:.0f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="demo,bert,cnn")
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; us, median over {args.steps} steps")
    for name in args.models.split(","):
        measure(name, args.steps)


if __name__ == "__main__":
    main()
