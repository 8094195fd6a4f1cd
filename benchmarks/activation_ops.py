"""Cost of the reductions behind activation statistics, against the forward op that made the tensor.

    python benchmarks/activation_ops.py [--device cpu|cuda]

For a few activation shapes (a conv feature map, transformer hidden states) prints the
microseconds of each candidate reduction and its ratio to a ReLU over the same tensor (one
read, one write: what the forward already paid), so the choice of ops in
``gradsight.runtime.activations`` can be checked on the machine at hand.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pyserver"))
from gradsight.runtime.activations import activation_stats, dead_fraction, module_flags, row_flags  # noqa: E402

SHAPES = {"conv 32x32x32x32": (32, 32, 32, 32), "hidden 16x64x512": (16, 64, 512), "hidden 16x64x128": (16, 64, 128)}


def _old_dead(x: torch.Tensor, axis: int) -> torch.Tensor:
    alive = (x != 0).movedim(axis, -1).reshape(-1, x.shape[axis]).any(dim=0)
    return 1.0 - alive.float().mean()


def timed(fn: Callable[[], object], device: str, n: int = 30) -> float:
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def report(label: str, x: torch.Tensor, dev: str) -> None:
    axis = 1 if x.dim() == 4 else x.dim() - 1
    relu = torch.nn.ReLU()
    base = timed(lambda: torch.relu(x), dev)
    ops: dict[str, Callable[[], object]] = {
        "count_nonzero (torch)": lambda: torch.count_nonzero(x),
        "mask sum (x != 0).sum()": lambda: (x != 0).sum(),
        "float pass |x| > 0 summed (before)": lambda: x.abs().gt_(0).sum(dtype=torch.float32),
        "sum of |sign(x)| (gradsight)": lambda: torch.sign(x).abs_().sum(),
        "sum of sign(x), x >= 0 (gradsight, ReLU)": lambda: torch.sign(x).sum(),
        "dead units: mask moved to unit axis": lambda: _old_dead(x, axis),
        "dead units: amax/amin (gradsight)": lambda: dead_fraction(x, axis),
        "dead units: amax, x >= 0 (gradsight, ReLU)": lambda: dead_fraction(x, axis, nonneg=True),
        "L2 norm (vector_norm)": lambda: torch.linalg.vector_norm(x),
        "sum of squares (dot)": lambda: torch.dot(x.reshape(-1), x.reshape(-1)),
        "x - x[0] (gradsight, CPU: the std's shift)": lambda: x.reshape(-1) - x.reshape(-1)[0],
        "var_mean (gradsight, accelerators)": lambda: torch.var_mean(x.reshape(-1), correction=0),
        "all statistics of a ReLU output (gradsight)": lambda: activation_stats(relu, row_flags(module_flags(relu), x.device), None, x),
    }
    print(f"{label}: ReLU {base:.1f} us")
    for name, fn in ops.items():
        us = timed(fn, dev)
        print(f"  {name:<46} {us:9.1f} us  {us / base:6.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}; us per call (ratio to a ReLU over the tensor)")
    for label, shape in SHAPES.items():
        report(label, torch.relu(torch.randn(*shape, device=args.device)), args.device)


if __name__ == "__main__":
    main()
