"""Where gradsight's time goes, step by step: the cost of each kind of step inside its callbacks.

    python benchmarks/step_costs.py [--models bert,demo,cnn] [--device cpu|cuda] [--steps 300] [--profile]

One session per model after a few plain warm-up steps. Prints the plain step (median ms), then
gradsight's own time per step (inside its callbacks) for: the session start (watch()), the
first step, the common step (median), the sampled steps and the steps of a capture window,
with the anomalies that opened capture windows, and the amortised total per step. --profile
adds the top gradsight functions (cProfile) over the common steps.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
from gradsight.runtime.api import watch  # noqa: E402
from overhead import IN_HOOKS, TASKS, _sync  # noqa: E402  (importing overhead installs the in-hook timers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,demo,cnn")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    dev = args.device
    print(f"device {dev}, torch {torch.__version__}; ms per step inside gradsight's callbacks")
    for name in args.models.split(","):
        task = TASKS[name](dev)
        plain = []
        for _ in range(30):
            t0 = time.perf_counter()
            task.step()
            _sync(dev)
            plain.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "run.db"
            t0 = time.perf_counter()
            handle = watch(task.model, task.opt, store=db)
            start = time.perf_counter() - t0
            costs = []
            prof = cProfile.Profile() if args.profile else None
            for i in range(args.steps):
                IN_HOOKS[0] = 0.0
                if prof is not None and i >= 20:
                    prof.enable()
                task.step()
                if prof is not None:
                    prof.disable()
                _sync(dev)
                costs.append(IN_HOOKS[0])
            handle.close()
            con = sqlite3.connect(db)
            kinds = {s: (bool(sa), bool(ca)) for s, sa, ca in con.execute("SELECT step, sampled, capture FROM steps")}
            events = con.execute("SELECT step, name, message FROM events WHERE kind = 'trigger'").fetchall()
            con.close()
        common = [c for s, c in enumerate(costs) if s > 0 and not any(kinds.get(s, (True, True)))]
        sampled = [c for s, c in enumerate(costs) if s > 0 and kinds.get(s, (False, False))[0] and not kinds[s][1]]
        window = [c for s, c in enumerate(costs) if s > 0 and kinds.get(s, (False, False))[1]]
        p = statistics.median(plain) * 1000

        def ms(xs: list[float]) -> str:
            return f"{statistics.median(xs) * 1000:.2f} ms x{len(xs)}" if xs else "-"

        print(f"{name}: plain {p:.2f} ms/step; session start {start * 1000:.1f} ms; first step {costs[0] * 1000:.1f} ms; "
              f"common {ms(common)}; sampled {ms(sampled)}; capture window {ms(window)}; "
              f"amortised {statistics.fmean(costs) * 1000:.3f} ms/step = {statistics.fmean(costs) * 1000 / p:.3f} of plain")
        for step, trig, msg in events:
            print(f"  anomaly at step {step}: {trig}: {msg}")
        if prof is not None:
            pstats.Stats(prof).sort_stats("tottime").print_stats("gradsight", 12)


if __name__ == "__main__":
    main()
