"""Overhead of gradsight.watch against plain training, interleaved in one process.

    python benchmarks/overhead.py [--rounds 5] [--steps 100] [--models bert,demo] [--device cpu|cuda]

For each model: blocks of ``--steps`` training steps alternate between plain
and watched (a fresh session per block, defaults unless --every is given),
``--rounds`` times. Prints the median over rounds of each mode's mean ms/step, and the median over
rounds of the ratio watched/plain of blocks run back to back, and the time
spent inside gradsight's callbacks per step as a share of the plain step (a
direct measure of its own cost on the training thread, robust to the noise of
shared machines; it leaves out effects such as the writer thread's CPU use).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pyserver"))

from gradsight.runtime import hooks as _hooks  # noqa: E402
from gradsight.runtime import session as _session  # noqa: E402
from gradsight.runtime.api import watch  # noqa: E402
from gradsight.runtime.session import DEFAULT_EVERY  # noqa: E402

IN_HOOKS = [0.0]  # seconds spent inside gradsight's callbacks on the training thread


def _account(cls: type, name: str) -> None:
    """Time a gradsight callback (outermost calls only: no double counting)."""
    original = getattr(cls, name)
    depth = [0]

    def timed(*args: object, **kwargs: object) -> object:
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                IN_HOOKS[0] += time.perf_counter() - t0

    setattr(cls, name, timed)


# gradsight's callbacks on the training thread (op_counts.py instruments the same ones)
CALLBACKS: tuple[tuple[type, str], ...] = (
    *((_session.Session, name) for name in ("on_optimizer_created", "on_optimizer_pre", "on_closure_end", "on_optimizer_post",
                                            "on_backward_begin", "on_backward_end", "on_zero_grad", "on_clip", "on_clip_norms", "on_scaled",
                                            "on_scaler_step")),
    # (the activation recorder runs inside these two: they are its hooks)
    *((_hooks.ForwardWatch, name) for name in ("_pre", "_post")))
for _cls, _name in CALLBACKS:
    _account(_cls, _name)

Step = Callable[[], None]
POOL = 32  # batches cycled through: one fixed batch gets memorised, and its dead units are real anomalies


@dataclass
class Task:
    """A classification loop's parts: peers that need their own loss modules (Cockpit) build their step from them."""

    model: nn.Module
    opt: torch.optim.Optimizer
    batches: Iterator[tuple[torch.Tensor, ...]]
    forward: Callable[[nn.Module, tuple[torch.Tensor, ...]], tuple[torch.Tensor, torch.Tensor]]  # -> (logits [N, C], targets [N])

    def step(self) -> None:
        batch = next(self.batches)
        self.opt.zero_grad()
        logits, targets = self.forward(self.model, batch)
        nn.functional.cross_entropy(logits, targets).backward()
        self.opt.step()


def _bert(device: str, hidden: int, layers: int, heads: int, batch: int, seq: int) -> Task:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=max(128, seq), num_labels=4)
    model = BertForSequenceClassification(config).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pool = [(torch.randint(0, 1000, (batch, seq), device=device), torch.randint(0, 4, (batch,), device=device)) for _ in range(POOL)]

    def forward(m: nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        ids, labels = batch
        return m(input_ids=ids).logits, labels

    return Task(model, opt, itertools.cycle(pool), forward)


def bert_task(device: str) -> Task:
    """A tiny BERT (2 layers, hidden 128): on a GPU its step is bound by kernel launches."""
    return _bert(device, 128, 2, 2, 16, 64)


def bert_base_task(device: str) -> Task:
    """BERT-base's shape (12 layers, hidden 768, 86M parameters), batch 32 x 128: a GPU-bound step (for GPUs)."""
    return _bert(device, 768, 12, 12, 32, 128)


def demo_task(device: str) -> Task:
    from gradsight.demo import model as dm

    torch.manual_seed(0)
    model = dm.TinyTransformer().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)  # the demo's model without its fault
    data = dm.batches(0)
    pool = [tuple(t.to(device) for t in next(data)) for _ in range(POOL)]

    def forward(m: nn.Module, batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, targets = batch
        logits = m(tokens)
        return logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)

    return Task(model, opt, itertools.cycle(pool), forward)


def cnn_task(device: str) -> Task:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)  # (SGD 0.01 with momentum kills ~40% of the fc units: a real anomaly)

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        """Noise with a bright 8x8 patch whose place is the class: a learnable task."""
        y = torch.randint(0, 10, (32,))
        x = 0.5 * torch.randn(32, 3, 32, 32)
        for i, c in enumerate(y.tolist()):
            r, k = divmod(c, 4)
            x[i, :, 8 * r : 8 * r + 8, 8 * k : 8 * k + 8] += 1.0
        return x.to(device), y.to(device)

    def forward(m: nn.Module, b: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        return m(b[0]), b[1]

    return Task(model, opt, itertools.cycle([batch() for _ in range(POOL)]), forward)


TASKS = {"bert": bert_task, "demo": demo_task, "cnn": cnn_task, "bert-base": bert_base_task}


def _setup(name: str) -> Callable[[str], tuple[nn.Module, torch.optim.Optimizer, Step]]:
    def setup(device: str) -> tuple[nn.Module, torch.optim.Optimizer, Step]:
        task = TASKS[name](device)
        return task.model, task.opt, task.step

    return setup


SETUPS = {name: _setup(name) for name in TASKS}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_block(step: Step, n: int, device: str) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return out


Mode = tuple[int, bool | None] | None  # (every, defer) of a watched mode; None: plain


def measure(name: str, device: str, rounds: int, steps: int, modes: dict[str, Mode], tmp: Path) -> dict[str, list[float]]:
    """Per round, each mode's mean ms/step over its block (a mean, so sampled steps count in full);
    also, under '<mode> hooks', the ms/step spent inside gradsight's callbacks."""
    model, opt, step = SETUPS[name](device)
    time_block(step, 10, device)  # warm up
    out: dict[str, list[float]] = {m: [] for m in modes}
    out.update({f"{m} hooks": [] for m, spec in modes.items() if spec is not None})
    for r in range(rounds):
        for mode, spec in modes.items():
            if spec is None:
                block = time_block(step, steps, device)
            else:
                every, defer = spec
                handle = watch(model, opt, store=tmp / f"{name}-{mode}-{r}.db", every=every, defer=defer)
                IN_HOOKS[0] = 0.0
                try:
                    block = time_block(step, steps, device)
                finally:
                    handle.close()
                out[f"{mode} hooks"].append(IN_HOOKS[0] / steps * 1000)
            out[mode].append(statistics.fmean(block) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2 * DEFAULT_EVERY, help="steps per block (a multiple of --every keeps sampling exact)")
    ap.add_argument("--models", default="bert,demo")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--every", type=int, default=DEFAULT_EVERY)
    ap.add_argument("--full", action="store_true", help="also measure full detail (activation statistics every step)")
    ap.add_argument("--sync", action="store_true", help="also measure defaults with deferred reading off (it is on by default on CUDA)")
    args = ap.parse_args()
    modes: dict[str, Mode] = {"plain": None, "gradsight": (args.every, None)}
    if args.sync:
        modes["sync"] = (args.every, False)
    if args.full:
        modes["full"] = (1, None)
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{args.rounds} rounds x {args.steps} steps per mode, interleaved")
    header = f"{'model':<8}" + "".join(f"{m + ' ms/step':>20}" for m in modes) + "".join(f"{m + ' ratio':>16}" for m in modes if m != "plain")
    header += "".join(f"{m + ' in-hook share':>22}" for m in modes if m != "plain")
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            res = measure(name, args.device, args.rounds, args.steps, modes, Path(tmp))
            row = f"{name:<8}" + "".join(f"{statistics.median(res[m]):>20.2f}" for m in modes)
            spread: list[str] = []
            # the ratio of each round's blocks (run back to back), then the median over rounds
            for m in modes:
                if m != "plain":
                    ratios = sorted(w / p for w, p in zip(res[m], res["plain"]))
                    row += f"{statistics.median(ratios):>16.3f}"
                    spread.append(f"{m}: {ratios[0]:.3f}..{ratios[-1]:.3f}")
            plain = statistics.median(res["plain"])
            for m in modes:
                if m != "plain":
                    row += f"{statistics.median(res[m + ' hooks']) / plain:>22.3f}"
            print(row + "   (per-round " + ", ".join(spread) + ")", flush=True)


if __name__ == "__main__":
    main()
