"""How gradsight's cost grows: with the model (parameters, modules) and with the run (steps).

    python benchmarks/scaling.py [--part models|steps|both] [--rounds 3] [--steps 20] [--run-steps 1000,10000,100000]

models: MLP stacks of about 1M, 10M and 100M parameters with 10 to 500 modules, plain and
  watched (gradsight defaults) in interleaved blocks in one process: ms/step, the ratio, the
  share of the step spent inside gradsight's callbacks, and the run store's growth per step
  (bytes added by steps N+1..2N, so the fixed start-up rows do not count).
steps: synthetic stores of 200 modules written the way the runtime writes them, at 1k, 10k and
  100k steps: file size, bytes per step, and `diagnose` time (load + analysis + JSON).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]


def models_part(rounds: int, steps: int) -> None:
    import torch
    from torch import nn

    from gradsight.runtime.api import watch
    from overhead import IN_HOOKS, time_block

    configs = [("1M / 10", 5, 448), ("1M / 500", 250, 64), ("10M / 100", 50, 448), ("100M / 500", 250, 632)]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {rounds} rounds x {steps} steps per mode, interleaved")
    print(f"{'params / modules':<18}{'params':>12}{'modules':>9}{'plain ms':>11}{'gradsight ms':>14}{'ratio':>8}{'in-hook':>9}{'store B/step':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, depth, width in configs:
            torch.manual_seed(0)
            layers: list[nn.Module] = []
            for _ in range(depth):
                layers += [nn.Linear(width, width), nn.ReLU()]
            model = nn.Sequential(*layers, nn.Linear(width, 1))
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            pool = [torch.randn(32, width) for _ in range(8)]
            k = [0]

            def step(model: nn.Module = model, opt: torch.optim.Optimizer = opt, pool: list[torch.Tensor] = pool, k: list[int] = k) -> None:
                x = pool[k[0] % len(pool)]
                k[0] += 1
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()

            time_block(step, 3, "cpu")
            plain: list[float] = []
            watched: list[float] = []
            hooks: list[float] = []
            growth: list[float] = []
            for r in range(rounds):
                plain.append(statistics.fmean(time_block(step, steps, "cpu")) * 1000)
                store = Path(tmp) / f"{depth}x{width}-{r}.db"
                handle = watch(model, opt, store=store)
                IN_HOOKS[0] = 0.0
                try:
                    block = time_block(step, steps, "cpu")
                    hooks.append(IN_HOOKS[0] / steps * 1000)
                    handle._session.writer.flush()
                    size_half = _size(store)
                    time_block(step, steps, "cpu")
                    handle._session.writer.flush()
                    growth.append((_size(store) - size_half) / steps)
                finally:
                    handle.close()
                watched.append(statistics.fmean(block) * 1000)
            n_params = sum(p.numel() for p in model.parameters())
            n_modules = len(list(model.modules()))
            ratio = statistics.median(w / p for w, p in zip(watched, plain))
            share = statistics.median(h / p for h, p in zip(hooks, plain))
            print(f"{label:<18}{n_params:>12,}{n_modules:>9}{statistics.median(plain):>11.2f}{statistics.median(watched):>14.2f}"
                  f"{ratio:>8.3f}{share:>9.3f}{statistics.median(growth):>14,.0f}", flush=True)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def steps_part(run_steps: list[int], modules: int) -> None:
    from diagnosis_speed import synth_store
    from gradsight.analysis.diagnose import diagnose

    print(f"{'steps':>9}{'modules':>9}{'store MiB':>11}{'bytes/step':>12}{'write s':>9}{'diagnose s':>12}{'diagnose us/step':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in run_steps:
            path = Path(tmp) / f"run{n}.db"
            t0 = time.perf_counter()
            synth_store(path, n, modules, 50)
            written = time.perf_counter() - t0
            size = _size(path)
            times = []
            for _ in range(2 if n >= 50000 else 3):
                t0 = time.perf_counter()
                diagnose(path)
                times.append(time.perf_counter() - t0)
            best = min(times)
            print(f"{n:>9,}{modules:>9}{size / 2**20:>11.1f}{size / n:>12,.0f}{written:>9.1f}{best:>12.2f}{best / n * 1e6:>18.1f}", flush=True)
            path.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="both", choices=["models", "steps", "both"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--run-steps", default="1000,10000,100000")
    ap.add_argument("--modules", type=int, default=200)
    args = ap.parse_args()
    if args.part in ("models", "both"):
        models_part(args.rounds, args.steps)
    if args.part in ("steps", "both"):
        steps_part([int(x) for x in args.run_steps.split(",")], args.modules)


if __name__ == "__main__":
    main()
