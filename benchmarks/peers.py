"""gradsight beside its peers, on the same training loops, interleaved in one process.

    python benchmarks/peers.py [--models bert,demo,cnn] [--rounds 3] [--steps 100] [--device cpu|cuda]

Modes, each a block of --steps steps, rotated --rounds times (so every mode meets the
same machine load): plain; gradsight defaults; gradsight full detail (activation
statistics every step); torch.autograd.detect_anomaly; wandb.watch(log="all",
log_freq=1) offline; Cockpit's "economy" preset (cockpit-for-pytorch + BackPACK).
Prints the median ms/step and the ratio to plain (median over rounds of the ratio of
blocks run back to back). A peer that is not installed or cannot run a model is left
out of that row with the reason printed. Install the peers for this benchmark only:
    bash benchmarks/peers-venv.sh   (its own venv: Cockpit needs torchvision, which needs torch 2.14.1)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
from gradsight.runtime.api import watch  # noqa: E402
from gradsight.runtime.session import DEFAULT_EVERY  # noqa: E402
from overhead import TASKS, Task, _sync  # noqa: E402

MODES = ("plain", "gradsight", "gradsight-full", "detect_anomaly", "wandb", "cockpit")


class Unavailable(Exception):
    """A peer that cannot run here (not installed, or the model is beyond what it supports)."""


Runner = Callable[[int], None]  # runs n steps


@contextlib.contextmanager
def mode_runner(mode: str, task: Task, tmp: Path, tag: str) -> Iterator[Runner]:
    def plain(n: int) -> None:
        for _ in range(n):
            task.step()

    if mode == "plain":
        yield plain
    elif mode in ("gradsight", "gradsight-full"):
        handle = watch(task.model, task.opt, store=tmp / f"{tag}.db", every=DEFAULT_EVERY if mode == "gradsight" else 1)
        try:
            yield plain
        finally:
            handle.close()
    elif mode == "detect_anomaly":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autograd.detect_anomaly():
                yield plain
    elif mode == "wandb":
        try:
            import wandb
        except ImportError as exc:
            raise Unavailable(f"wandb is not installed ({exc})") from exc
        os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        run = wandb.init(project="gradsight-peers", dir=str(tmp), mode="offline", reinit="finish_previous")
        wandb.watch(task.model, log="all", log_freq=1)

        def logged(n: int) -> None:
            for _ in range(n):
                task.step()
                run.log({})  # what commits the histograms the hooks computed

        try:
            yield logged
        finally:
            wandb.unwatch(task.model)
            run.finish()
    elif mode == "cockpit":
        yield cockpit_runner(task)
    else:
        raise ValueError(mode)


def cockpit_runner(task: Task) -> Runner:
    try:
        from backpack import extend
        from cockpit import Cockpit
        from cockpit.utils.configuration import configuration
    except ImportError as exc:
        raise Unavailable(f"cockpit-for-pytorch is not installed ({exc})") from exc
    model = extend(task.model)
    # Cockpit needs BackPACK's extensions on every layer and on the loss; it raises on modules BackPACK lacks
    cockpit = Cockpit(model.parameters(), quantities=configuration("economy"))
    lossfunc = extend(torch.nn.CrossEntropyLoss(reduction="mean"))
    individual = torch.nn.CrossEntropyLoss(reduction="none")
    state = {"step": 0}

    def run(n: int) -> None:
        for _ in range(n):
            batch = next(task.batches)
            task.opt.zero_grad()
            logits, targets = task.forward(model, batch)
            loss = lossfunc(logits, targets)
            losses = individual(logits, targets)
            with cockpit(state["step"], info={"batch_size": len(targets), "individual_losses": losses, "loss": loss, "optimizer": task.opt}):
                loss.backward(create_graph=cockpit.create_graph(state["step"]))
            task.opt.step()
            state["step"] += 1

    try:  # one step now: a model BackPACK cannot handle fails here, not in the middle of the timings
        run(1)
    except Exception as exc:
        raise Unavailable(f"Cockpit/BackPACK cannot run this model: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}") from exc
    return run


def measure(name: str, device: str, rounds: int, steps: int, modes: list[str], tmp: Path) -> tuple[dict[str, list[float]], dict[str, str]]:
    task = TASKS[name](device)
    for _ in range(10):
        task.step()
    times: dict[str, list[float]] = {m: [] for m in modes}
    skipped: dict[str, str] = {}
    for r in range(rounds):
        order = modes[r % len(modes):] + modes[: r % len(modes)]  # rotate, so no mode always follows another
        for mode in order:
            if mode in skipped:
                continue
            try:
                with mode_runner(mode, task, tmp, f"{name}-{mode}-{r}") as runner:
                    runner(3)  # warm the mode's own paths
                    _sync(device)
                    t0 = time.perf_counter()
                    runner(steps)
                    _sync(device)
                    times[mode].append((time.perf_counter() - t0) / steps * 1000)
            except Unavailable as exc:
                skipped[mode] = str(exc)
            if mode == "cockpit":
                task = TASKS[name](device)  # BackPACK's extend() hooked the model (even when it then failed): a fresh one
                for _ in range(3):
                    task.step()
    return times, skipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,demo,cnn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=DEFAULT_EVERY)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    modes = args.modes.split(",")
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, {args.rounds} rounds x {args.steps} steps per mode")
    print(f"{'model':<6} " + " ".join(f"{m:>22}" for m in modes))
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            times, skipped = measure(name, args.device, args.rounds, args.steps, modes, Path(tmp))
            plain = times["plain"]
            cells = []
            for m in modes:
                if m in skipped or not times[m]:
                    cells.append(f"{'-':>22}")
                    notes.append(f"{name}/{m}: left out: {skipped.get(m, 'no timing')}")
                    continue
                ratios = [t / p for t, p in zip(times[m], plain)]
                cells.append(f"{statistics.median(times[m]):>9.2f} ms {statistics.median(ratios):>6.2f}x   ")
            print(f"{name:<6} " + " ".join(cells), flush=True)
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
