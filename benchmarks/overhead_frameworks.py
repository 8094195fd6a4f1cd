"""Overhead of gradsight's callbacks, with their defaults, on a Hugging Face ``Trainer`` run and a PyTorch
Lightning run, beside the same runs without gradsight, interleaved in one process.

    OMP_NUM_THREADS=1 python benchmarks/overhead_frameworks.py [--rounds 5] [--steps 200] [--stacks hf,lightning]

The method of ``benchmarks/overhead.py``, with the framework owning the loop. Per stack, each round runs a
block plain and a block watched (``gradsight.integrations.hf.GradsightCallback`` /
``gradsight.integrations.lightning.GradsightCallback`` with no options: every step's gradient norms, full
statistics every 100 steps, the built-in triggers), the order swapped every other round so that a slow drift
of the machine falls on both. A block is one ``trainer.train()`` / ``trainer.fit()`` of ``--steps + 1`` steps,
the same run from the same initial weights (a fresh session and store per watched block); its time per step
is measured from the end of its step 0 to the end of its last step: ``--steps`` steps holding exactly
``--steps / 100`` sampled steps (the first of them also keeps one step's activations, once per run, as the
run's baseline). The framework's start (``train()`` / ``fit()`` setting up, the callback's ``watch()``, step 0)
is a fixed cost per run, reported apart.

Prints, per stack: the median over rounds of each mode's mean ms/step, the median over rounds of the ratio
watched/plain of the round's two blocks (and its range), the time spent inside gradsight's callbacks per
step (as ``overhead.py`` instruments them: the optimizer, backward, zero_grad, clipping and module forward
hooks) in ms and as a share of the plain step, split into an ordinary step and a sampled one, and the fixed
cost per run. The in-hook time leaves out what gradsight adds outside its callbacks (the writer thread's
CPU time, PyTorch's slower module call path while global forward hooks exist); the ratio includes it.
"""

from __future__ import annotations

import argparse
import atexit
import copy
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
from gradsight.runtime.session import DEFAULT_EVERY  # noqa: E402
from gradsight.store import RunStore  # noqa: E402
from overhead import IN_HOOKS  # noqa: E402  (importing it times gradsight's callbacks)

POOL = 32  # batches in a dataset: one epoch is POOL steps (both modes cross the same epoch boundaries)


@dataclass
class Block:
    """One block's marks: (perf_counter, IN_HOOKS) at the end of each step, and the fixed costs of a watched run."""

    marks: list[tuple[float, float]] = field(default_factory=list)
    start_s: float = 0.0  # in the callback's start (watch) and end (close)
    anomalies: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), IN_HOOKS[0]))

    def ms_per_step(self) -> float:
        (t0, _), (t1, _) = self.marks[0], self.marks[-1]
        return (t1 - t0) / (len(self.marks) - 1) * 1000

    def hook_ms(self) -> list[float]:
        """ms inside gradsight's callbacks in each of steps 1..N (from the end of a step to the end of the next)."""
        return [(b[1] - a[1]) * 1000 for a, b in zip(self.marks, self.marks[1:])]

    def step0_ms(self) -> float:
        return self.marks[0][1] * 1000  # IN_HOOKS is reset before the run: everything up to step 0's end


def _events(store: Path, block: Block) -> None:
    with RunStore(store) as run:
        block.anomalies = [(int(e.step or 0), e.name) for e in run.events("trigger")]
        block.warnings = [e.name for e in run.events("warning")]


# -- Hugging Face Trainer ------------------------------------------------------------------------------

def hf_stack(batch: int, seq: int) -> tuple[str, Callable[[int, Path | None], Block]]:
    """A tiny BERT from its config (2 layers, hidden 128; no download) fine-tuned by ``Trainer`` with its
    defaults (AdamW, linear schedule, max_grad_norm 1.0); the label is a function of the tokens (learnable)."""
    import transformers
    from torch.utils.data import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from gradsight.integrations.hf import GradsightCallback

    transformers.logging.set_verbosity_error()

    class Tokens(Dataset):
        def __init__(self, n: int) -> None:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randint(0, 1000, (n, seq), generator=g)
            self.y = (self.x[:, 0] + self.x[:, 1]) % 2

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"input_ids": self.x[i], "labels": self.y[i]}

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                        max_position_embeddings=max(128, seq), num_labels=2)
    model = BertForSequenceClassification(config)
    init = copy.deepcopy(model.state_dict())
    data = Tokens(POOL * batch)
    out = tempfile.mkdtemp(prefix="gradsight-hf-")  # (Trainer's output_dir: nothing is saved there)
    atexit.register(shutil.rmtree, out, True)

    class Clock(TrainerCallback):
        def __init__(self, block: Block) -> None:
            self.block = block

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.block.mark()

    class Timed(GradsightCallback):
        def __init__(self, store: Path, block: Block) -> None:
            super().__init__(store)  # gradsight's defaults
            self.block = block

        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            t0 = time.perf_counter()
            super().on_train_begin(*args, **kwargs)
            self.block.start_s += time.perf_counter() - t0

        def on_train_end(self, *args: Any, **kwargs: Any) -> None:
            t0 = time.perf_counter()
            super().on_train_end(*args, **kwargs)
            self.block.start_s += time.perf_counter() - t0

    def run(steps: int, store: Path | None) -> Block:
        block = Block()
        callbacks: list[Any] = [Timed(store, block)] if store is not None else []
        callbacks.append(Clock(block))
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch, max_steps=steps + 1, learning_rate=1e-4,
                                 report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
        model.load_state_dict(init)  # every block is the same run from the start
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
        for cb in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(cb)
        IN_HOOKS[0] = 0.0
        trainer.train()
        if store is not None:
            _events(store, block)
        return block

    return f"HF Trainer, BertForSequenceClassification (2 layers, hidden 128, 2 heads), batch {batch} x {seq} tokens", run


# -- PyTorch Lightning ---------------------------------------------------------------------------------

def lightning_stack(batch: int) -> tuple[str, Callable[[int, Path | None], Block]]:
    """A small CNN (2 conv + BatchNorm blocks, 2 linear layers) on 32x32 images, automatic optimization with
    AdamW, the loss logged with ``self.log`` each step; the class is where a bright patch is (learnable)."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from gradsight.integrations.lightning import GradsightCallback

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    class CNN(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))

        def training_step(self, b: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = b
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=3e-4)

    torch.manual_seed(0)
    y = torch.randint(0, 10, (POOL * batch,))
    x = 0.5 * torch.randn(POOL * batch, 3, 32, 32)
    for i, c in enumerate(y.tolist()):
        r, k = divmod(c, 4)
        x[i, :, 8 * r: 8 * r + 8, 8 * k: 8 * k + 8] += 1.0
    loader = DataLoader(TensorDataset(x, y), batch_size=batch)
    module = CNN()
    init = copy.deepcopy(module.state_dict())

    class Clock(L.Callback):
        def __init__(self, block: Block) -> None:
            self.block = block

        def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
            self.block.mark()

    class Timed(GradsightCallback):
        def __init__(self, store: Path, block: Block) -> None:
            super().__init__(store)  # gradsight's defaults
            self.block = block

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            t0 = time.perf_counter()
            super().on_fit_start(trainer, pl_module)
            self.block.start_s += time.perf_counter() - t0

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            t0 = time.perf_counter()
            super().on_fit_end(trainer, pl_module)
            self.block.start_s += time.perf_counter() - t0

    def run(steps: int, store: Path | None) -> Block:
        block = Block()
        callbacks: list[Any] = [Timed(store, block)] if store is not None else []
        callbacks.append(Clock(block))
        trainer = L.Trainer(max_steps=steps + 1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1, callbacks=callbacks)
        module.load_state_dict(init)  # every block is the same run from the start
        IN_HOOKS[0] = 0.0
        trainer.fit(module, loader)
        if store is not None:
            _events(store, block)
        return block

    return f"Lightning, CNN (2 conv+BN, 2 linear; AdamW, automatic optimization), batch {batch} x 3x32x32", run


STACKS: dict[str, Callable[[argparse.Namespace], tuple[str, Callable[[int, Path | None], Block]]]] = {
    "hf": lambda a: hf_stack(a.hf_batch, a.hf_seq),
    "lightning": lambda a: lightning_stack(a.lightning_batch),
}


def measure(run: Callable[[int, Path | None], Block], rounds: int, steps: int, tmp: Path, name: str) -> dict[str, list[Block]]:
    run(10, None)  # warm up both paths (first calls, allocator)
    run(10, tmp / f"{name}-warm.db")
    out: dict[str, list[Block]] = {"plain": [], "gradsight": []}
    for r in range(rounds):
        order = ("plain", "gradsight") if r % 2 == 0 else ("gradsight", "plain")
        for mode in order:
            out[mode].append(run(steps, None if mode == "plain" else tmp / f"{name}-{r}.db"))
    return out


def report(title: str, res: dict[str, list[Block]], steps: int, every: int) -> None:
    plain = [b.ms_per_step() for b in res["plain"]]
    watched = [b.ms_per_step() for b in res["gradsight"]]
    ratios = sorted(w / p for w, p in zip(watched, plain))
    p_ms = statistics.median(plain)
    hooks = [b.hook_ms() for b in res["gradsight"]]
    in_hook = statistics.median(statistics.fmean(h) for h in hooks)
    sampled = [i for i in range(steps) if (i + 1) % every == 0]  # hook_ms()[i] is step i + 1
    common = statistics.median(v for h in hooks for i, v in enumerate(h) if i not in sampled)
    at_sampled = statistics.median(h[i] for h in hooks for i in sampled) if sampled else float("nan")
    start = statistics.median(b.start_s * 1000 for b in res["gradsight"])
    step0 = statistics.median(b.step0_ms() for b in res["gradsight"])
    print(title)
    print(f"  plain {p_ms:.2f} ms/step, gradsight {statistics.median(watched):.2f} ms/step, "
          f"ratio {statistics.median(ratios):.3f} (per round {', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"  inside gradsight's callbacks: {in_hook:.3f} ms/step = {in_hook / p_ms:.3f} of a plain step "
          f"(an ordinary step {common:.3f} ms, a sampled step {at_sampled:.2f} ms x{len(sampled)} per block)")
    print(f"  per run, once: the callback's watch() and close() {start:.1f} ms, up to the end of step 0 {step0:.1f} ms in its callbacks")
    anomalies = sorted({a for b in res["gradsight"] for a in b.anomalies})
    warned = sorted({w for b in res["gradsight"] for w in b.warnings})
    print(f"  anomalies in the watched blocks: {anomalies or 'none'}; warning events: {warned or 'none'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2 * DEFAULT_EVERY, help="timed steps per block (a multiple of 100 keeps sampling exact)")
    ap.add_argument("--stacks", default="hf,lightning")
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--hf-seq", type=int, default=64)
    ap.add_argument("--lightning-batch", type=int, default=32)
    args = ap.parse_args()
    print(f"device cpu, torch {torch.__version__}, threads {torch.get_num_threads()} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}), "
          f"{args.rounds} rounds x {args.steps} steps per mode, interleaved (order swapped every other round)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.stacks.split(","):
            t0 = time.perf_counter()
            title, run = STACKS[name](args)
            res = measure(run, args.rounds, args.steps, Path(tmp), name)
            report(title, res, args.steps, DEFAULT_EVERY)
            print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
