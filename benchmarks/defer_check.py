"""Deferred reading on an accelerator records the same run as reading each step at once.

    python benchmarks/defer_check.py [--device cuda]

Trains the same small MLP twice (a gradient explosion at step 30), once with deferred reading
(the default on CUDA) and once without, and compares the stores: every step, its loss and
gradient norm, and the anomalies with their steps. Exits 1 on a difference. The CPU test suite
checks the same with deferral forced on (tests/test_runtime_api.py); this runs it where the
pinned-memory copy and CUDA events are real.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pyserver"))
import gradsight  # noqa: E402
from gradsight.store import RunStore  # noqa: E402

STEPS, EXPLODE_AT = 60, 30


def run(device: str, defer: bool | None, store: Path) -> tuple[dict[str, np.ndarray], list[tuple[int, str]]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    handle = gradsight.watch(model, opt, store=store, every=25, defer=defer)
    for step in range(STEPS):
        x = torch.randn(32, 8, generator=gen).to(device)
        opt.zero_grad()
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        (loss * (1e4 if step == EXPLODE_AT else 1.0)).backward()
        opt.step()
    handle.close()
    with RunStore(handle.store) as rs:
        return rs.steps(), handle.anomalies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        now, now_anomalies = run(args.device, False, Path(tmp) / "now.db")
        later, later_anomalies = run(args.device, None if args.device == "cuda" else True, Path(tmp) / "later.db")
    problems = []
    if list(later["step"]) != list(range(STEPS)):
        problems.append(f"deferred run has steps {list(later['step'])}")
    for col in ("loss", "grad_norm"):
        if not np.allclose(now[col], later[col], equal_nan=True, rtol=1e-5):
            problems.append(f"{col} differs")
    if now_anomalies != later_anomalies or (EXPLODE_AT, "grad_explode") not in later_anomalies:
        problems.append(f"anomalies differ: {now_anomalies} vs {later_anomalies}")
    print(f"device {args.device}: {STEPS} steps each; anomalies at once {now_anomalies}, deferred {later_anomalies}")
    print("deferred reading: " + ("same run" if not problems else "DIFFERENT: " + "; ".join(problems)))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
