"""How gradsight's cost grows: with the model (parameters, modules) and with the run (steps).

    python benchmarks/scaling.py [--part models|steps|both] [--rounds 3] [--steps 20] [--run-steps 1000,10000,100000]

models: MLP stacks of about 1M, 10M and 100M parameters with 10 to 500 modules, plain and
  watched in interleaved blocks in one process: the steady ratio (gradsight defaults, steps
  that are not sampled), the share of the step spent inside gradsight's callbacks, the
  ratio of a sampled step (activation statistics: full detail), the ratio amortised over
  the default sampling (1 step in 100), and the run store's growth per step (closed stores
  of N and 2N steps with triggers off: the difference, so neither start-up rows nor a
  capture window count; SQLite grows by whole pages, so tiny models can show 0).
steps: synthetic stores of 200 modules written the way the runtime writes them, at 1k, 10k and
  100k steps: file size, bytes per step, and `diagnose` time (load + analysis + JSON).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]


def models_part(rounds: int, steps: int) -> None:
    import torch
    from torch import nn

    from gradsight.runtime.api import watch
    from gradsight.runtime.session import DEFAULT_EVERY
    from gradsight.runtime.triggers import BUILTIN

    Residual = _residual()
    from overhead import IN_HOOKS, time_block

    # pre-norm residual MLP blocks (they train at any depth, so no trigger fires and the steady state is measured):
    # (label, blocks, width); each block is 5 modules (the block, LayerNorm, Linear, GELU, Linear) and 2 w^2 weights
    configs = [("1M / 10", 2, 500), ("1M / 500", 100, 70), ("10M / 100", 20, 500), ("100M / 500", 100, 707)]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {rounds} rounds x {steps} steps per mode, interleaved;"
          f" watched blocks start after 2 steps (the model is found, step 0 sampled)")
    print(f"{'params / modules':<18}{'params':>13}{'modules':>9}{'plain ms':>10}{'steady':>9}{'in-hook':>9}{'sampled':>9}"
          f"{'amortised':>11}{'store B/step':>14}{'anomalies':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, depth, width in configs:
            torch.manual_seed(0)
            model = nn.Sequential(*[Residual(width) for _ in range(depth)], nn.LayerNorm(width), nn.Linear(width, 1))
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            w_true = torch.randn(width, 1) / width**0.5
            # a learnable target with noise: the loss settles at a floor instead of memorised zeros (whose
            # relative wiggles are real loss spikes / vanishing gradients to gradsight's triggers)
            pool = [(x, x @ w_true + 0.3 * torch.randn(32, 1)) for x in (torch.randn(32, width) for _ in range(32))]
            k = [0]
            anomalies: list[tuple[int, str]] = []

            def step(model: nn.Module = model, opt: torch.optim.Optimizer = opt, pool: list[tuple[torch.Tensor, torch.Tensor]] = pool,
                     k: list[int] = k) -> None:
                x, y = pool[k[0] % len(pool)]
                k[0] += 1
                opt.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()

            def watched(every: int, n: int, store: Path, model: nn.Module = model, opt: torch.optim.Optimizer = opt,
                        step: Callable[[], None] = step, anomalies: list[tuple[int, str]] = anomalies,
                        triggers: tuple[str, ...] = BUILTIN) -> tuple[float, float]:
                """(mean ms/step, ms/step inside gradsight) of n steps after the first two."""
                handle = watch(model, opt, store=store, every=every, triggers=triggers)
                try:
                    time_block(step, 2, "cpu")
                    IN_HOOKS[0] = 0.0
                    block = time_block(step, n, "cpu")
                    anomalies.extend(handle.anomalies)
                    return statistics.fmean(block) * 1000, IN_HOOKS[0] / n * 1000
                finally:
                    handle.close()

            time_block(step, 3, "cpu")
            plain: list[float] = []
            steady: list[float] = []
            hooks: list[float] = []
            full: list[float] = []
            for r in range(rounds):
                plain.append(statistics.fmean(time_block(step, steps, "cpu")) * 1000)
                ms, hk = watched(DEFAULT_EVERY, steps, Path(tmp) / f"s{depth}x{width}-{r}.db")
                steady.append(ms)
                hooks.append(hk)
                full.append(watched(1, steps, Path(tmp) / f"f{depth}x{width}-{r}.db")[0])
            # growth: closed stores of N and 2N steps (each a single file), the difference per step
            a, b = Path(tmp) / f"g{depth}a.db", Path(tmp) / f"g{depth}b.db"
            watched(DEFAULT_EVERY, steps, a, triggers=())  # no trigger: no capture window falls in the measure
            watched(DEFAULT_EVERY, 2 * steps, b, triggers=())
            growth = (_size(b) - _size(a)) / steps
            p_ms = statistics.median(plain)
            ratio = statistics.median(w / p for w, p in zip(steady, plain))
            sampled = statistics.median(f / p for f, p in zip(full, plain))
            amortised = ((DEFAULT_EVERY - 1) * ratio + sampled) / DEFAULT_EVERY
            share = statistics.median(h / p for h, p in zip(hooks, plain))
            n_params = sum(p.numel() for p in model.parameters())
            print(f"{label:<18}{n_params:>13,}{len(list(model.modules())):>9}{p_ms:>10.2f}{ratio:>9.3f}{share:>9.3f}{sampled:>9.2f}"
                  f"{amortised:>11.3f}{growth:>14,.0f}{len(anomalies):>11}", flush=True)
            if anomalies:
                print(f"    anomalies caught: {sorted({name for _, name in anomalies})}")


def _residual() -> type:
    import torch
    from torch import nn

    class Residual(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, width)
            self.act = nn.GELU()
            self.down = nn.Linear(width, width)
            with torch.no_grad():  # GPT-2's scaled init: the residual stream keeps its scale at any depth
                self.down.weight.mul_(0.1)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return x + self.down(self.act(self.up(self.norm(x))))

    return Residual


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
