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
from torch.nn.modules.loss import _Loss
from torch.utils.hooks import RemovableHandle

from .gradstats import count_nonzero
from .layout import RELU_LIKE, SATURATING, WEIGHTED, Layout, first_tensor

# act_nan is 1 when the output holds any NaN/Inf (counting them would cost a pass on every sampled step)
FIELDS = ("act_min", "act_max", "act_mean", "act_std", "act_zero_frac", "act_nan", "dead_frac", "sat_frac", "in_dead_frac")
SATURATION_LEVEL = 5.0  # |x| beyond which tanh/sigmoid are saturated (DeepDiagnosis)
MAX_CALLS_PER_STEP = 8  # a module called in a loop (an RNN cell) is measured this often per step
_NAN = float("nan")


def _unit_axis(module: nn.Module, x: torch.Tensor) -> int:
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) or x.dim() >= 4:
        return 1
    return x.dim() - 1


def dead_fraction(x: torch.Tensor, axis: int) -> torch.Tensor:
    """Fraction of units along ``axis`` that are exactly zero for every sample.

    Units whose largest and smallest values are both zero: two reductions that read ``x`` in
    place (a boolean mask moved to the unit axis costs ~20x more on CPU)."""
    if x.dim() < 2 or x.numel() == 0:
        return torch.tensor(_NAN, device=x.device)
    dims = tuple(d for d in range(x.dim()) if d != axis % x.dim())
    dead = (x.amax(dim=dims) == 0) & (x.amin(dim=dims) == 0)
    return dead.float().mean()


def _floats(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


# which optional fields a row carries
_DEAD, _SAT, _IN_DEAD = 1, 2, 4
_BASE = 5  # min, max, sum, sum of squares, non-zero count


def _flags(module: nn.Module) -> int:
    return (_DEAD if isinstance(module, RELU_LIKE) else 0) | (_SAT if isinstance(module, SATURATING) else 0) | (
        _IN_DEAD if isinstance(module, WEIGHTED) else 0)


def activation_stats(module: nn.Module, flags: int, inp: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """A few reductions on the device; means, std and fractions are finished on the host.

    Counts are float passes (see :func:`count_nonzero`)."""
    x = _floats(out.detach())
    flat = x.reshape(-1)
    mn, mx = torch.aminmax(flat)
    fields = [mn, mx, flat.sum(), torch.dot(flat, flat), count_nonzero(flat)]
    if flags & _DEAD:
        fields.append(dead_fraction(x, _unit_axis(module, x)))
    if flags & _SAT:
        fields.append(_floats(inp.detach()).abs().gt_(SATURATION_LEVEL).mean() if inp is not None else torch.tensor(_NAN))
    if flags & _IN_DEAD:
        fields.append(dead_fraction(inp.detach(), _unit_axis(module, inp)) if inp is not None else torch.tensor(_NAN))
    return torch.stack([f.to(torch.float32) for f in fields])


class ActivationRecorder:
    """Arms PyTorch's global forward hook for one step and gathers statistics (and tensors on capture)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._flags = [_flags(m) for m in layout.modules]
        self._handles: list[RemovableHandle] = []
        self.rows: list[tuple[int, int, int, torch.Tensor | None]] = []  # module, flags, numel, stats (None: as previous)
        self._calls: dict[int, int] = {}
        self._last_out: torch.Tensor | None = None
        self.order: list[int] = []  # pre-order of first forward calls, when asked for
        self.capture: set[int] = set()
        self.capture_budget = 0
        self.captured: list[tuple[int, np.ndarray]] = []
        self.failed = False
        self.loss_modules: set[str] = set()  # loss modules (outside the model) seen called
        self.modes: dict[int, bool] = {}  # module id -> module.training when it ran

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self, *, want_order: bool = False) -> None:
        if self._handles or self.failed:
            return
        self.rows, self._calls, self._last_out, self.modes = [], {}, None, {}
        reg = torch.nn.modules.module
        self._handles.append(reg.register_module_forward_hook(self._hook))
        if want_order:
            self.order = []
            self._handles.append(reg.register_module_forward_pre_hook(self._pre_hook))

    def disarm(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._last_out = None

    def _pre_hook(self, module: nn.Module, args: Any) -> None:
        i = self.layout.module_index.get(id(module))
        if i is not None and i not in self._calls and i not in self.order:
            self.order.append(i)

    def _hook(self, module: nn.Module, args: Any, output: Any) -> None:
        i = self.layout.module_index.get(id(module))
        if i is None or self.failed:
            if i is None and isinstance(module, _Loss):
                self.loss_modules.add(type(module).__name__)
            return
        calls = self._calls.get(i, 0)
        if calls >= MAX_CALLS_PER_STEP:
            return
        self._calls[i] = calls + 1
        self.modes[i] = module.training
        try:
            out = first_tensor(output)
            if out is None or not out.is_floating_point() or out.numel() == 0:
                return
            flags = self._flags[i]
            inp = first_tensor(args) if flags & (_SAT | _IN_DEAD) else None
            if inp is not None and (not inp.is_floating_point() or inp.numel() == 0):
                inp = None
            if out is self._last_out and flags == 0 and self.rows:
                self.rows.append((i, -1, out.numel(), None))  # a container passing its last child's output on
            else:
                self.rows.append((i, flags, out.numel(), activation_stats(module, flags, inp, out)))
            self._last_out = out
            if i in self.capture and calls == 0 and self.capture_budget > 0:
                arr = _fit(out.detach().float().cpu().numpy(), self.capture_budget)
                self.capture_budget -= arr.nbytes
                self.captured.append((i, arr))
        except Exception as exc:  # never break the user's forward
            self.failed = True
            self.disarm()
            import sys

            print(f"gradsight: activation statistics disabled after an internal error: {exc!r}", file=sys.stderr)

    def take(self, transfer_add: Any) -> list[tuple[int, int, int, int]]:
        """Queue gathered rows on a transfer (as 'act'); returns (module, flags, numel, source row) in call order."""
        meta: list[tuple[int, int, int, int]] = []
        tensors: list[torch.Tensor] = []
        last = -1
        for i, flags, n, stats in self.rows:
            if stats is not None:
                last = len(tensors)
                tensors.append(stats)
            meta.append((i, flags, n, last))
        if tensors:
            transfer_add("act", torch.cat([t.to(tensors[0].device) for t in tensors]))
        self.rows = []
        self._calls = {}
        return meta


def _decode(meta: list[tuple[int, int, int, int]], flat: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Rows of FIELDS per hook call, from the variable-length device rows."""
    pos = 0
    out: list[tuple[int, np.ndarray]] = []
    decoded: list[np.ndarray] = []
    for i, flags, n, src in meta:
        if flags >= 0 and src == len(decoded):  # a new device row starts here
            width = _BASE + bin(flags).count("1")
            raw = flat[pos : pos + width].astype(np.float64)
            pos += width
            mn, mx, total, sumsq, nonzero = raw[:_BASE]
            mean = total / n
            var = max(0.0, (sumsq / n - mean * mean) * n / max(1, n - 1)) if np.isfinite(sumsq) else np.nan
            extra = list(raw[_BASE:])
            dead = extra.pop(0) if flags & _DEAD else np.nan
            sat = extra.pop(0) if flags & _SAT else np.nan
            in_dead = extra.pop(0) if flags & _IN_DEAD else np.nan
            bad = 0.0 if np.isfinite(mn) and np.isfinite(mx) else 1.0
            decoded.append(np.array([mn, mx, mean, np.sqrt(var), 1.0 - nonzero / n, bad, dead, sat, in_dead]))
        row = decoded[src]
        if flags < 0:  # a container passing a child's output on: the same statistics, none of the child's extras
            row = row.copy()
            row[6:] = np.nan
        out.append((i, row))
    return out


def aggregate(n_modules: int, meta: list[tuple[int, int, int, int]], flat: np.ndarray) -> tuple[dict[str, np.ndarray], int | None]:
    """Per-module activation metrics from rows in call order; also the first module with a non-finite output."""
    out = {f: np.full(n_modules, np.nan) for f in FIELDS}
    first_bad: int | None = None
    for i, row in _decode(meta, flat):
        if first_bad is None and row[5] > 0:
            first_bad = i
        for c, f in enumerate(FIELDS):
            v = float(row[c])
            cur = out[f][i]
            if math.isnan(cur):
                out[f][i] = v
            elif f == "act_min":
                out[f][i] = min(cur, v)
            elif f in ("act_max", "act_std", "dead_frac", "in_dead_frac", "sat_frac", "act_nan"):
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
