"""How many tensor operations gradsight runs per step: a count that the machine's noise cannot move.

    python benchmarks/op_counts.py [--models bert,demo,cnn] [--device cpu|cuda]

Every ATen operation that gradsight's callbacks run on the training thread is counted with a
``TorchDispatchMode`` entered around each callback (the user's own forward and backward are not
counted). On a GPU each counted operation that is not a view is about one kernel launch, and on
small tensors each costs a few microseconds of dispatch on any device, so the count is what the
host-side cost of launch-bound steps follows. Prints, per model, the operations (and those that
are views or metadata only) of a common step, a sampled step (defaults: 1 in 100) and a step at
full detail (every=1), after a few warm-up steps.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
from gradsight.runtime.api import watch  # noqa: E402
from overhead import CALLBACKS, TASKS  # noqa: E402

VIEWS = {"view", "_unsafe_view", "reshape", "alias", "detach", "slice", "select", "as_strided", "expand", "t", "transpose",
         "unsqueeze", "squeeze", "permute", "_reshape_alias", "lift_fresh", "empty", "empty_strided", "_to_copy_noop"}


class Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


COUNTER: list[Count | None] = [None]
DEPTH = [0]  # outermost callbacks only


def _counted(cls: type, name: str) -> None:
    original = getattr(cls, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        mode = COUNTER[0]
        if mode is None or DEPTH[0]:
            return original(*args, **kwargs)
        DEPTH[0] += 1
        try:
            with mode:
                return original(*args, **kwargs)
        finally:
            DEPTH[0] -= 1

    setattr(cls, name, wrapper)


def _install() -> None:
    for cls, name in CALLBACKS:
        _counted(cls, name)


def _split(ops: Counter[str]) -> tuple[int, int]:
    views = sum(n for op, n in ops.items() if op in VIEWS)
    return sum(ops.values()) - views, views


def _measure(step: Callable[[], None], n: int) -> list[Counter[str]]:
    out = []
    for _ in range(n):
        COUNTER[0] = Count()
        step()
        out.append(COUNTER[0].ops)
        COUNTER[0] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,demo,cnn")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--top", type=int, default=0, help="also print the N most frequent operations of a full-detail step")
    ap.add_argument("--accelerator-path", action="store_true",
                    help="on CPU, count the operations gradsight uses on accelerators (fused statistics; what a GPU launches)")
    args = ap.parse_args()
    if args.accelerator_path:
        from gradsight.runtime import activations, gradstats

        activations.row_flags = lambda flags, device: flags | activations._MOMENTS  # type: ignore[assignment]
        gradstats.all_on_cpu = lambda tensors: False  # type: ignore[assignment]
    _install()
    print(f"device {args.device}, torch {torch.__version__}; ATen operations per step inside gradsight's callbacks "
          "(compute, + views/metadata)")
    for name in args.models.split(","):
        task = TASKS[name](args.device)
        for _ in range(3):
            task.step()
        with tempfile.TemporaryDirectory() as tmp:
            handle = watch(task.model, task.opt, store=Path(tmp) / "d.db", triggers="none")
            counts = _measure(task.step, 3)  # step 0 (sampled, the first), 1, 2 (common)
            handle.close()
            common, sampled = counts[2], counts[0]
            handle = watch(task.model, task.opt, store=Path(tmp) / "f.db", every=1, triggers="none")
            full = _measure(task.step, 3)[2]
            handle.close()
        n_params = sum(1 for p in task.model.parameters() if p.requires_grad)
        n_modules = sum(1 for _ in task.model.modules())
        cells = "; ".join(f"{label} {c} + {v}" for label, (c, v) in
                          (("common", _split(common)), ("sampled (first)", _split(sampled)), ("full detail", _split(full))))
        print(f"{name} ({n_params} parameter tensors, {n_modules} modules): {cells}")
        if args.top:
            print("   ", ", ".join(f"{op} {n}" for op, n in full.most_common(args.top)))


if __name__ == "__main__":
    main()
