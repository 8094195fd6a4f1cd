"""Capture at an anomaly: whole tensors kept in the store, within a memory cap, without calling user code.

At the trigger step: the gradients and weights of the worst modules, the embedding tables and the
inputs of that step and the K before it. The activations come from the next forward pass, which the
activation recorder measures anyway (the capture window is sampled in full): the modules of interest
are captured there, under their own step. The user's forward is never run a second time.
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any

import numpy as np
import torch
from torch import nn

from ..store import StoreWriter
from .activations import fit
from .layout import Layout, first_tensor, local
from .triggers import Fired, History

CAPTURE_MODULES = 4  # modules whose gradients and weights are kept
EMBEDDING_BYTES = 8 * 2**20  # per embedding table
INPUT_BYTES = 4 * 2**20  # per kept input batch


def host_array(t: torch.Tensor) -> np.ndarray:
    """A tensor as a numpy array on the host; bf16 (which numpy lacks) becomes float32."""
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.cpu().numpy()


def tensor_bytes(value: Any) -> int:
    """Bytes of the tensors in a (nested) argument list, as far as a cheap look goes."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(tensor_bytes(v) for v in value[:16])
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in list(value.values())[:16])
    return 0


class Inputs:
    """The root model's inputs of the last K+1 steps (references, no copies), within a byte cap: a large
    capture window keeps as many batches as fit, not every batch of the run."""

    def __init__(self, keep: int, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: deque[tuple[int, tuple[Any, ...], dict[str, Any], int]] = deque(maxlen=max(1, keep))
        self._bytes = 0

    def add(self, step: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        size = tensor_bytes(args) + tensor_bytes(kwargs)
        if len(self._items) == self._items.maxlen:
            self._bytes -= self._items[0][3]
        self._items.append((step, args, kwargs, size))
        self._bytes += size
        while len(self._items) > 1 and self._bytes > self.max_bytes:
            self._bytes -= self._items.popleft()[3]

    def last(self) -> tuple[int, tuple[Any, ...], dict[str, Any]] | None:
        if not self._items:
            return None
        step, args, kwargs, _ = self._items[-1]
        return step, args, kwargs

    def __iter__(self) -> Any:
        return iter([(s, a, k) for s, a, k, _ in self._items])

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes


def worst_modules(layout: Layout, fired: list[Fired], mods: dict[str, np.ndarray], history: History, own: np.ndarray) -> list[int]:
    """Modules to capture: those named by the triggers, then the largest growth of gradient norm."""
    out: list[int] = []
    for f in fired:
        if f.module is not None and f.module in history.index:
            i = history.index[f.module]
            if own[i] and i not in out:
                out.append(i)
    norms = mods.get("grad_norm")
    if norms is not None:
        past = [sv.modules["grad_norm"] for sv in list(history.steps)[-21:-1] if "grad_norm" in sv.modules]
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            base = np.nanmedian(np.stack(past), axis=0) if past else np.ones_like(norms)
            growth = np.where(np.isfinite(norms), norms / np.where(base > 0, base, np.nan), np.inf)
        growth = np.where(own[: len(growth)], np.nan_to_num(growth, nan=-1.0, posinf=1e30), -1.0)
        for i in np.argsort(-growth):
            if len(out) >= CAPTURE_MODULES or growth[i] < 0:
                break
            if int(i) not in out:
                out.append(int(i))
    return out[:CAPTURE_MODULES]


def interesting(layout: Layout, worst: list[int]) -> set[int]:
    """Modules whose activations are captured from the next forward: the worst, and attention and embeddings."""
    return set(worst) | {i for i, m in enumerate(layout.modules)
                         if isinstance(m, (nn.Softmax, nn.Embedding, nn.MultiheadAttention)) or "attn" in layout.names[i].rsplit(".", 1)[-1].lower()}


def capture(writer: StoreWriter, layout: Layout, names: list[str], step: int, worst: list[int], inputs: Inputs, budget: int) -> int:
    """Write the step's whole tensors within ``budget`` bytes (``names``: the modules' names in the store);
    returns the budget left (for activations)."""
    for mid in worst:
        for j in sorted(layout.own_params(mid), key=lambda j: -layout.numel[j])[:1]:
            p = layout.params[j]
            for role, tensor in (("gradient", p.grad), ("weight", p.detach())):
                if tensor is None or budget <= 0:
                    continue
                arr = fit(local(tensor).detach().float().cpu().numpy(), budget)  # (a sharded tensor: this rank's shard)
                budget -= arr.nbytes
                writer.put_tensor(step, names[mid], role, arr)
    for mid, mod in enumerate(layout.modules):  # embeddings, for projections
        if isinstance(mod, nn.Embedding) and budget > 0:
            arr = fit(local(mod.weight).detach().float().cpu().numpy(), min(budget, EMBEDDING_BYTES))
            budget -= arr.nbytes
            writer.put_tensor(step, names[mid], "weight", arr)
    for in_step, args, kwargs in list(inputs):
        x = first_tensor(args) if args else first_tensor(kwargs)
        if x is not None and budget > 0:
            arr = fit(host_array(local(x)), min(budget, INPUT_BYTES))
            budget -= arr.nbytes
            writer.put_tensor(in_step, names[0], "input", arr)
    return budget
