"""Activation statistics through PyTorch's global forward hook, armed only on sampled steps.

Per module output: min, max, mean, std, fraction of zeros, NaN/Inf count, and
where they apply: dead units (units that are zero for every sample of the
batch) of ReLU-like outputs and of the inputs of weighted layers (which
catches a functional ``F.relu`` before them), and the fraction of
tanh/sigmoid inputs beyond +-5 (saturated). The hook call order also tells
which module first produced a non-finite output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .layout import RELU_LIKE, SATURATING, WEIGHTED, Layout, first_tensor

FIELDS = ("act_min", "act_max", "act_mean", "act_std", "act_zero_frac", "act_nan", "dead_frac", "sat_frac", "in_dead_frac")
SATURATION_LEVEL = 5.0  # |x| beyond which tanh/sigmoid are saturated (DeepDiagnosis)
MAX_CALLS_PER_STEP = 8  # a module called in a loop (an RNN cell) is measured this often per step
_NAN = float("nan")


def _unit_axis(module: nn.Module, x: torch.Tensor) -> int:
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) or x.dim() >= 4:
        return 1
    return x.dim() - 1


def dead_fraction(x: torch.Tensor, axis: int) -> torch.Tensor:
    """Fraction of units along ``axis`` that are exactly zero for every sample."""
    if x.dim() < 2 or x.numel() == 0:
        return torch.tensor(_NAN, device=x.device)
    alive = (x != 0).movedim(axis, -1).reshape(-1, x.shape[axis]).any(dim=0)
    return 1.0 - alive.float().mean()


def activation_stats(module: nn.Module, inp: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    x = out.detach()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    n = x.numel()
    mn, mx = torch.aminmax(x)
    nan = torch.tensor(_NAN, device=x.device)
    std = x.std() if n > 1 else nan
    fields = [mn, mx, x.mean(), std, 1.0 - torch.count_nonzero(x) / n, n - torch.isfinite(x).sum()]
    fields.append(dead_fraction(x, _unit_axis(module, x)) if isinstance(module, RELU_LIKE) else nan)
    has_inp = inp is not None and inp.is_floating_point() and inp.numel() > 0
    if has_inp and isinstance(module, SATURATING):
        assert inp is not None
        fields.append((inp.detach().abs() > SATURATION_LEVEL).float().mean())
    else:
        fields.append(nan)
    if has_inp and isinstance(module, WEIGHTED):
        assert inp is not None
        fields.append(dead_fraction(inp.detach(), _unit_axis(module, inp)))
    else:
        fields.append(nan)
    return torch.stack([f.reshape(()).float() for f in fields])


class ActivationRecorder:
    """Arms PyTorch's global forward hook for one step and gathers statistics (and tensors on capture)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._handles: list[RemovableHandle] = []
        self.rows: list[tuple[int, torch.Tensor]] = []
        self._calls: dict[int, int] = {}
        self.order: list[int] = []  # pre-order of first forward calls, when asked for
        self._want_order = False
        self.capture: set[int] = set()
        self.capture_budget = 0
        self.captured: list[tuple[int, np.ndarray]] = []
        self.failed = False

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self, *, want_order: bool = False) -> None:
        if self._handles or self.failed:
            return
        self.rows, self._calls = [], {}
        self._want_order = want_order
        reg = torch.nn.modules.module
        self._handles.append(reg.register_module_forward_hook(self._hook))
        if want_order:
            self.order = []
            self._handles.append(reg.register_module_forward_pre_hook(self._pre_hook))

    def disarm(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        i = self.layout.module_index.get(id(module))
        if i is not None and i not in self._calls and i not in self.order:
            self.order.append(i)

    def _hook(self, module: nn.Module, args: Any, output: Any) -> None:
        i = self.layout.module_index.get(id(module))
        if i is None or self.failed:
            return
        calls = self._calls.get(i, 0)
        if calls >= MAX_CALLS_PER_STEP:
            return
        self._calls[i] = calls + 1
        try:
            out = first_tensor(output)
            if out is None or not out.is_floating_point() or out.numel() == 0:
                return
            inp = first_tensor(args)
            self.rows.append((i, activation_stats(module, inp, out)))
            if i in self.capture and calls == 0 and self.capture_budget > 0:
                arr = out.detach().float().cpu().numpy()
                arr = _fit(arr, self.capture_budget)
                self.capture_budget -= arr.nbytes
                self.captured.append((i, arr))
        except Exception as exc:  # never break the user's forward
            self.failed = True
            self.disarm()
            import sys

            print(f"gradsight: activation statistics disabled after an internal error: {exc!r}", file=sys.stderr)

    def take(self, transfer_add: Any) -> list[int]:
        """Queue gathered rows on a transfer (as 'act'); returns their module ids in call order."""
        ids = [i for i, _ in self.rows]
        if self.rows:
            transfer_add("act", torch.stack([r.to(self.rows[0][1].device) for _, r in self.rows]).reshape(-1))
        self.rows = []
        self._calls = {}
        return ids


def aggregate(n_modules: int, ids: list[int], flat: np.ndarray) -> tuple[dict[str, np.ndarray], int | None]:
    """Per-module activation metrics from rows in call order; also the first module with a non-finite output."""
    k = len(FIELDS)
    rows = flat.reshape(-1, k) if len(ids) else np.zeros((0, k))
    out = {f: np.full(n_modules, np.nan) for f in FIELDS}
    first_bad: int | None = None
    with np.errstate(invalid="ignore"):
        for r, i in enumerate(ids):
            row = rows[r]
            if first_bad is None and row[5] > 0:
                first_bad = i
            for c, f in enumerate(FIELDS):
                v = float(row[c])
                cur = out[f][i]
                if math.isnan(cur):
                    out[f][i] = v
                elif f == "act_min":
                    out[f][i] = min(cur, v)
                elif f == "act_nan":
                    out[f][i] = cur + v
                elif f in ("act_max", "act_std", "dead_frac", "in_dead_frac", "sat_frac"):
                    out[f][i] = max(cur, v)
                else:  # means of fractions and values over repeated calls
                    out[f][i] = (cur + v) / 2
    return out, first_bad


def _fit(arr: np.ndarray, budget: int) -> np.ndarray:
    """Keep the leading rows of ``arr`` that fit in ``budget`` bytes."""
    if arr.nbytes <= budget or arr.ndim == 0:
        return arr
    per_row = max(1, arr.nbytes // max(1, arr.shape[0]))
    return arr[: max(1, budget // per_row)].copy()
