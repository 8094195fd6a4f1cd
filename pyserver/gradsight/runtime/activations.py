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
import time
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.loss import _Loss

from .layout import RELU_LIKE, SATURATING, WEIGHTED, Layout, first_tensor

# act_nan is 1 when the output holds any NaN/Inf (counting them would cost a pass on every sampled step)
FIELDS = ("act_min", "act_max", "act_mean", "act_std", "act_zero_frac", "act_nan", "dead_frac", "sat_frac", "in_dead_frac")
SATURATION_LEVEL = 5.0  # |x| beyond which tanh/sigmoid are saturated (DeepDiagnosis)
MAX_CALLS_PER_STEP = 8  # a module called in a loop (an RNN cell) is measured this often per step
RECENT_OUTPUTS = 4  # measured outputs kept to read a later layer's input dead units from
_NAN = float("nan")
_ZERO = torch.zeros(())  # a CPU input without zeros has no dead units


def _unit_axis(module: nn.Module, x: torch.Tensor) -> int:
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) or x.dim() >= 4:
        return 1
    return x.dim() - 1


def dead_fraction(x: torch.Tensor, axis: int, *, nonneg: bool = False) -> torch.Tensor:
    """Fraction of units along ``axis`` that are exactly zero for every sample.

    Units whose largest and smallest values are both zero (only the largest for an output known
    to be >= 0): reductions that read ``x`` in place (a boolean mask moved to the unit axis costs
    ~20x more on CPU)."""
    if x.dim() < 2 or x.numel() == 0:
        return torch.tensor(_NAN, device=x.device)
    dims = tuple(d for d in range(x.dim()) if d != axis % x.dim())
    dead = x.amax(dim=dims) == 0
    if not nonneg:
        dead &= x.amin(dim=dims) == 0
    return dead.float().mean()


def _nonneg_output(module: nn.Module) -> bool:
    """Whether the module's output is >= 0 (or NaN) by construction."""
    if isinstance(module, (nn.ReLU, nn.ReLU6)):
        return True
    return isinstance(module, nn.Threshold) and module.threshold >= 0 and module.value >= 0


# which optional fields a row carries
_DEAD, _SAT, _IN_DEAD = 1, 2, 4
_NONNEG = 8  # not a field: the output is >= 0, so fewer reductions find its zeros and dead units
_MOMENTS = 16  # not a field: the row holds the mean and variance from one fused kernel (accelerators)
_FIELD_FLAGS = _DEAD | _SAT | _IN_DEAD
# min, max, sum of x - x[0], sum of its squares, non-zero count, x[0];
# with _MOMENTS: min, max, mean, (population) variance, non-zero count
_BASE = 6
_NONZERO = 4  # where the non-zero count is, in both forms


def module_flags(module: nn.Module) -> int:
    return (_DEAD if isinstance(module, RELU_LIKE) else 0) | (_SAT if isinstance(module, SATURATING) else 0) | (
        _IN_DEAD if isinstance(module, WEIGHTED) else 0) | (_NONNEG if _nonneg_output(module) else 0)


def row_flags(flags: int, device: torch.device) -> int:
    """A module's flags for a row measured on ``device``."""
    return flags | (_MOMENTS if device.type != "cpu" else 0)


def _base(flags: int) -> int:
    return _BASE - 1 if flags & _MOMENTS else _BASE


def _width(flags: int) -> int:
    return _base(flags) + bin(flags & _FIELD_FLAGS).count("1")


def work_space(buf: torch.Tensor | None, numel: int) -> torch.Tensor:
    """The work space of a CPU row (see :func:`activation_stats`): ``buf``, or a larger float32 buffer."""
    return buf if buf is not None and buf.numel() >= numel else torch.empty(numel, dtype=torch.float32)


def activation_stats(module: nn.Module, flags: int, inp: torch.Tensor | None, out: torch.Tensor,
                     in_dead: torch.Tensor | None = None, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """A few reductions on the device (one float32 row, :func:`_width` long); means, std and
    fractions are finished on the host. ``in_dead``: the input's dead fraction when it is already
    known (it is an output measured just before: see :meth:`ActivationRecorder._known_dead`).

    On CPU non-zeros are counted as the sum of ``|sign(x)|`` (``torch.count_nonzero`` and sums of
    boolean masks cost 6-27x more there: benchmarks/activation_ops.py), and the spread is the sum
    of squares of ``x - x[0]``: a plain sum of squares in float32 loses the variance of values far
    from zero (a saturated sigmoid at 0.9999 +- 1e-4 read std 0), while the first value is near
    the mean whenever the spread is small. ``torch.var_mean``, one kernel on accelerators, costs
    20-30x a sum on CPU. ``scratch``: a float32 CPU buffer of at least ``out``'s size for those
    element-wise results (a fresh multi-megabyte tensor per output costs its page faults). Every
    field is float32, so the row is one ``stack``."""
    x = out.detach()
    if x.dtype != torch.float32:
        x = x.float()
    flat = x.reshape(-1)
    mn, mx = torch.aminmax(flat)
    nonneg = bool(flags & _NONNEG)
    if flags & _MOMENTS:  # one reduction kernel each (and a cast) on accelerators
        var, mean = torch.var_mean(flat, correction=0)
        fields = [mn, mx, mean, var, torch.count_nonzero(flat).float()]
    else:
        buf = scratch[: flat.numel()] if scratch is not None else torch.empty_like(flat)
        first = flat[0]
        shifted = torch.sub(flat, first, out=buf)
        fields = [mn, mx, shifted.sum(), torch.dot(shifted, shifted)]
        signs = torch.sign(flat, out=buf)  # (the shifted values are summed: the buffer is free again)
        fields += [signs.sum() if nonneg else signs.abs_().sum(), first]
    if flags & _DEAD:
        fields.append(dead_fraction(x, _unit_axis(module, x), nonneg=nonneg))
    if flags & _SAT:
        xi = None if inp is None else inp.detach() if inp.dtype == torch.float32 else inp.detach().float()
        fields.append(xi.abs().gt_(SATURATION_LEVEL).mean() if xi is not None else torch.tensor(_NAN, device=x.device))
    if flags & _IN_DEAD:
        if in_dead is None:
            in_dead = dead_fraction(inp.detach(), _unit_axis(module, inp)) if inp is not None else torch.tensor(_NAN, device=x.device)
        fields.append(in_dead)
    return torch.stack(fields)


class ActivationRecorder:
    """Gathers one step's statistics (and tensors on capture) while armed, from the session's global forward
    hooks (:class:`~.hooks.ForwardWatch` calls :meth:`note_call` and :meth:`measure`). The hooks stay registered
    for the whole run: arming flips a flag, so the set of global hooks never changes (torch.compile guards on it,
    and would compile again at every sampled step)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._flags = [module_flags(m) for m in layout.modules]
        self._armed = False
        self.want_order = False
        self.rows: list[tuple[int, int, int, torch.Tensor | None]] = []  # module, flags, numel, stats (None: as previous)
        self._calls: dict[int, int] = {}
        self._last_out: torch.Tensor | None = None
        # the last few measured outputs (q, k and v layers share one input), each with its dead units' axis, its row
        # and where the dead fraction is in it
        self._recent: list[tuple[torch.Tensor, int, torch.Tensor, int]] = []
        self.order: list[int] = []  # pre-order of first forward calls, when asked for
        self.capture: set[int] = set()
        self.capture_budget = 0
        self.captured: list[tuple[int, np.ndarray]] = []
        self.failed = False
        self.loss_modules: set[str] = set()  # loss modules (outside the model) seen called
        self.modes: dict[int, bool] = {}  # module id -> module.training when it ran
        self.spent = 0.0  # seconds in the hook, for the session's own-time measure
        self._scratch: torch.Tensor | None = None  # element-wise work space of CPU rows, kept while steps are measured

    @property
    def armed(self) -> bool:
        return self._armed

    def arm(self, *, want_order: bool = False) -> None:
        if self._armed or self.failed:
            return
        self.rows, self._calls, self._last_out, self._recent, self.modes = [], {}, None, [], {}
        self._armed = True
        self.want_order = want_order
        if want_order:
            self.order = []

    def disarm(self, *, keep_work_space: bool = False) -> None:
        """Stop measuring; ``keep_work_space``: the next step is measured too (the buffer stays)."""
        self._armed = False
        self.want_order = False
        self._last_out = None
        self._recent = []
        if not keep_work_space:
            self._scratch = None

    def note_call(self, module: nn.Module, args: Any) -> None:
        """A module is about to run (only while the forward order is wanted)."""
        i = self.layout.module_index.get(id(module))
        if i is not None and i not in self._calls and i not in self.order:
            self.order.append(i)

    def measure(self, module: nn.Module, args: Any, output: Any) -> None:
        """A module has run: its output's statistics (only while armed)."""
        t0 = time.perf_counter()
        try:
            self._measure(module, args, output)
        finally:
            self.spent += time.perf_counter() - t0

    def _measure(self, module: nn.Module, args: Any, output: Any) -> None:
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
            flags = row_flags(self._flags[i], out.device)
            inp = first_tensor(args) if flags & (_SAT | _IN_DEAD) else None
            if inp is not None and (not inp.is_floating_point() or inp.numel() == 0):
                inp = None
            if out is self._last_out and flags & ~_MOMENTS == 0 and self.rows:
                self.rows.append((i, -1, out.numel(), None))  # a container passing its last child's output on
            else:
                in_dead = self._known_dead(module, inp) if flags & _IN_DEAD else None
                if not flags & _MOMENTS:  # (rows from one fused kernel need no work space)
                    self._scratch = work_space(self._scratch, out.numel())
                row = activation_stats(module, flags, inp, out, in_dead, None if flags & _MOMENTS else self._scratch)
                self.rows.append((i, flags, out.numel(), row))
                # what the next layer's input dead units can be read from, when this output goes straight into it
                self._recent = [(out, _unit_axis(module, out) if flags & _DEAD else -1, row, _base(flags)),
                                *self._recent[:RECENT_OUTPUTS - 1]]
            self._last_out = out
            if i in self.capture and calls == 0 and self.capture_budget > 0:
                arr = fit(out.detach().float().cpu().numpy(), self.capture_budget)
                self.capture_budget -= arr.nbytes
                self.captured.append((i, arr))
        except Exception as exc:  # never break the user's forward
            self.failed = True
            self.disarm()
            import sys

            print(f"gradsight: activation statistics disabled after an internal error: {exc!r}", file=sys.stderr)

    def _known_dead(self, module: nn.Module, inp: torch.Tensor | None) -> torch.Tensor | None:
        """The dead fraction of a weighted layer's input when that input is an output just measured:
        a ReLU's own dead fraction along the same axis, or 0 for a CPU tensor without zeros (its
        count is on the host already); None when it must be measured."""
        for out, axis, row, dead_at in self._recent:
            if inp is not out:
                continue
            if axis >= 0 and axis == _unit_axis(module, inp):
                return row[dead_at]
            if row.device.type == "cpu" and inp.numel() < 2**24 and row.numpy()[_NONZERO] == inp.numel():  # (a host read; float32 counts exactly)
                return _ZERO
            return None
        return None

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


def _decode(meta: list[tuple[int, int, int, int]], flat: np.ndarray) -> list[tuple[int, list[float]]]:
    """Rows of FIELDS per hook call, from the variable-length device rows (plain floats: a step has
    tens of rows, and numpy's per-call cost would exceed the arithmetic)."""
    values = flat.tolist()
    pos = 0
    out: list[tuple[int, list[float]]] = []
    decoded: list[list[float]] = []
    for i, flags, n, src in meta:
        if flags >= 0 and src == len(decoded):  # a new device row starts here
            width = _width(flags)
            if flags & _MOMENTS:
                mn, mx, mean, var, nonzero, *extra = values[pos : pos + width]
            else:  # the sums of x - first and of its squares
                mn, mx, shift, squares, nonzero, first, *extra = values[pos : pos + width]
                mean = first + shift / n
                var = (squares - shift * shift / n) / n
            pos += width
            var = max(0.0, var * n / max(1, n - 1)) if math.isfinite(var) else _NAN
            dead = extra.pop(0) if flags & _DEAD else _NAN
            sat = extra.pop(0) if flags & _SAT else _NAN
            in_dead = extra.pop(0) if flags & _IN_DEAD else _NAN
            bad = 0.0 if math.isfinite(mn) and math.isfinite(mx) else 1.0
            decoded.append([mn, mx, mean, math.sqrt(var) if var == var else _NAN, 1.0 - nonzero / n, bad, dead, sat, in_dead])
        row = decoded[src]
        if flags < 0:  # a container passing a child's output on: the same statistics, none of the child's extras
            row = row[:6] + [_NAN] * (len(FIELDS) - 6)
        out.append((i, row))
    return out


_COMBINE_MIN = {FIELDS.index("act_min")}
_COMBINE_MAX = {FIELDS.index(f) for f in ("act_max", "act_std", "dead_frac", "in_dead_frac", "sat_frac", "act_nan")}


def aggregate(n_modules: int, meta: list[tuple[int, int, int, int]], flat: np.ndarray) -> tuple[dict[str, np.ndarray], int | None]:
    """Per-module activation metrics from rows in call order; also the first module with a non-finite output.
    A module called more than once in a step: the extreme of min, max, std and fractions, the running
    mean of the rest."""
    rows = _decode(meta, flat)
    first_bad = next((i for i, row in rows if row[5] > 0), None)
    merged: dict[int, list[float]] = {}
    for i, row in rows:
        cur = merged.get(i)
        if cur is None:
            merged[i] = list(row)
            continue
        for c, v in enumerate(row):
            if cur[c] != cur[c]:  # NaN so far
                cur[c] = v
            elif c in _COMBINE_MIN:
                cur[c] = min(cur[c], v)
            elif c in _COMBINE_MAX:
                cur[c] = max(cur[c], v)
            else:
                cur[c] = (cur[c] + v) / 2
    table = np.full((len(FIELDS), n_modules), np.nan)  # a row per field: each metric is a contiguous view
    if merged:
        table[:, list(merged)] = np.array(list(merged.values()), dtype=np.float64).T
    return dict(zip(FIELDS, table)), first_bad


def fit(arr: np.ndarray, budget: int) -> np.ndarray:
    """Keep the leading rows of ``arr`` that fit in ``budget`` bytes."""
    if arr.nbytes <= budget or arr.ndim == 0:
        return arr
    per_row = max(1, arr.nbytes // max(1, arr.shape[0]))
    return arr[: max(1, budget // per_row)].copy()
