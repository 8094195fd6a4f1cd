"""What gradsight's global module forward hooks cost a step, part by part, interleaved in one process.

    OMP_NUM_THREADS=1 python benchmarks/module_hooks.py [--rounds 12] [--steps 20]

A tiny BERT (2 layers, hidden 128; no download) trains in a plain loop (forward, backward, zero_grad; no
optimizer, no session), in blocks of ``--steps`` steps per variant, the variants interleaved, ``--rounds``
times; prints each variant's median ms/step and its difference from the run without hooks:

- ``none``: no global hooks;
- ``noop``: a global forward pre-hook and forward hook that do nothing (PyTorch's slower module call path);
- ``watch``: gradsight's :class:`~gradsight.runtime.hooks.ForwardWatch` following the model, each module
  output's graph node held in :class:`~gradsight.runtime.nanorigin.Tags` and let go at the backward's end
  (what a session does on an ordinary step);
- ``node-metadata``: the same hooks marking each output's graph node in its ``metadata`` dict instead (how
  gradsight marked them before: PyTorch makes an anomaly-metadata object and a dict per node).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pyserver"))
from gradsight.runtime import hooks, nanorigin  # noqa: E402


class _Unarmed:
    armed = False
    want_order = False


def _mark_metadata(module: object, output: Any) -> None:
    fn = getattr(output, "grad_fn", None)
    if fn is not None and "gradsight" not in fn.metadata:
        fn.metadata["gradsight"] = id(module)


AFTER_BACKWARD: list[Callable[[], None]] = []  # what a session does when a backward ends


def install(variant: str, model: torch.nn.Module) -> Callable[[], None]:
    """The variant's hooks; returns what removes them."""
    reg = torch.nn.modules.module
    if variant == "none":
        return lambda: None
    if variant == "noop":
        handles: list[RemovableHandle] = [reg.register_module_forward_pre_hook(lambda m, a: None),
                                          reg.register_module_forward_hook(lambda m, a, k, o: None, with_kwargs=True, always_call=True)]

        def remove() -> None:
            for h in handles:
                h.remove()

        return remove
    tags = nanorigin.Tags()
    watch = hooks.ForwardWatch(lambda tag, args, kwargs: None, tags if variant == "watch" else None)
    if variant != "watch":
        watch.on_output = _mark_metadata
    watch.follow("model", _Unarmed(), model)
    AFTER_BACKWARD.append(tags.clear)

    def undo() -> None:
        watch.remove()
        tags.clear()
        AFTER_BACKWARD.clear()

    return undo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    from transformers import BertConfig, BertForSequenceClassification
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                        max_position_embeddings=128, num_labels=2)
    model = BertForSequenceClassification(config)
    x, y = torch.randint(0, 1000, (16, 64)), torch.randint(0, 2, (16,))

    def step() -> None:
        model(input_ids=x, labels=y).loss.backward()
        for fn in AFTER_BACKWARD:
            fn()
        model.zero_grad(set_to_none=True)

    variants = ["none", "noop", "watch", "node-metadata"]
    for _ in range(5):
        step()
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            remove = install(v, model)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[v].append((time.perf_counter() - t0) / args.steps * 1000)
            remove()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.rounds} rounds x {args.steps} steps per variant, interleaved")
    base = statistics.median(times["none"])
    for v in variants:
        ms = statistics.median(times[v])
        print(f"  {v:14s} {ms:7.2f} ms/step  {ms - base:+.3f} ms  ({ms / base:.3f}x)")


if __name__ == "__main__":
    main()
