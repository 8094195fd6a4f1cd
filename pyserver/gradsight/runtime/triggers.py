"""Triggers: decide, from one step's numbers, that something went wrong.

Everything here works on plain numbers (numpy arrays over module ids), never
on tensors: the step's statistics reached the host before triggers run.
A fired trigger latches: it fires again only after being quiet for
``rearm`` steps, so one anomaly is one event, not one per step.
"""

from __future__ import annotations

import fnmatch
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..conditions import Condition, parse
from ..thresholds import Thresholds

BUILTIN = ("loss_spike", "grad_explode", "nan_inf", "vanishing", "dead_units")


@dataclass
class StepValues:
    """One step's numbers: step-level values and per-module arrays (NaN: no value)."""

    step: int
    scalars: dict[str, float]
    modules: dict[str, np.ndarray] = field(default_factory=dict)


class History:
    """Recent steps, newest last; also the :class:`~gradsight.conditions.Context` conditions read."""

    def __init__(self, names: list[str], maxlen: int = 64) -> None:
        self.names = names
        self.index = {n: i for i, n in enumerate(names)}
        self.steps: deque[StepValues] = deque(maxlen=maxlen)

    def push(self, values: StepValues) -> None:
        self.steps.append(values)

    @property
    def current(self) -> StepValues:
        return self.steps[-1]

    def _get(self, sv: StepValues, metric: str, module: str | None) -> float | None:
        if module is None:
            v = sv.scalars.get(metric)
        else:
            i = self.index.get(module)
            arr = sv.modules.get(metric)
            if i is None or arr is None or i >= len(arr):
                return None
            v = float(arr[i])
        if v is None or math.isnan(v):
            return None
        return v

    def value(self, metric: str, module: str | None) -> float | None:
        if not self.steps:
            return None
        return self._get(self.current, metric, module)

    def history(self, metric: str, module: str | None, n: int) -> list[float]:
        out = []
        for sv in list(self.steps)[-n:]:
            v = self._get(sv, metric, module)
            if v is not None:
                out.append(v)
        return out


@dataclass
class Fired:
    trigger: str
    message: str
    module: str | None = None
    value: float | None = None
    condition: str | None = None


Check = Callable[[History], "Fired | None"]


class Trigger:
    """A check with a latch."""

    def __init__(self, name: str, check: Check, rearm: int) -> None:
        self.name = name
        self.check = check
        self.rearm = max(1, rearm)
        self._quiet = self.rearm  # steps since the check last held
        self.fired = 0

    def __call__(self, history: History) -> Fired | None:
        hit = self.check(history)
        if hit is None:
            self._quiet += 1
            return None
        ready = self._quiet >= self.rearm
        self._quiet = 0
        if not ready:
            return None
        self.fired += 1
        return hit


def _layer_ids(history: History, weighted: np.ndarray) -> list[int]:
    return [i for i in range(len(history.names)) if weighted[i]]


def loss_spike(t: Thresholds) -> Check:
    def check(h: History) -> Fired | None:
        loss = h.value("loss", None)
        if loss is None:
            return None
        past = h.history("loss", None, t.loss_spike_window + 1)[:-1]
        if len(past) < max(3, t.loss_spike_window // 2):
            return None
        mean = sum(past) / len(past)
        if mean > 0 and loss > t.loss_spike_factor * mean:
            return Fired("loss_spike", f"loss {loss:.4g} is {loss / mean:.1f}x its {len(past)}-step mean {mean:.4g}",
                         value=loss, condition=f"loss > {t.loss_spike_factor:g} * mean(loss, {t.loss_spike_window})")
        return None

    return check


def grad_explode(t: Thresholds, own: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        norms = cur.modules.get("grad_norm")
        if norms is not None and len(norms):
            layer = np.where(own[: len(norms)], norms, np.nan)
            with np.errstate(invalid="ignore"):
                if np.isfinite(layer).any() and np.nanmax(np.where(np.isfinite(layer), layer, np.nan)) > t.layer_grad_norm:
                    i = int(np.nanargmax(np.where(np.isfinite(layer), layer, np.nan)))
                    return Fired("grad_explode", f"gradient norm of {h.names[i]!r} is {layer[i]:.4g} > {t.layer_grad_norm:g}",
                                 module=h.names[i], value=float(layer[i]), condition=f"grad_norm > {t.layer_grad_norm:g}")
        g = cur.scalars.get("grad_norm")
        if g is not None and math.isfinite(g) and g > t.global_grad_norm:
            return Fired("grad_explode", f"global gradient norm {g:.4g} > {t.global_grad_norm:g}", value=g,
                         condition=f"grad_norm > {t.global_grad_norm:g}")
        return None

    return check


def nan_inf(t: Thresholds, own: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        loss = cur.scalars.get("loss")
        first = cur.scalars.get("first_nonfinite_module")
        where = h.names[int(first)] if first is not None and not math.isnan(first) else None
        if loss is not None and not math.isfinite(loss):
            return Fired("nan_inf", f"loss is {loss}", module=where, value=loss, condition="not finite(loss)")
        for metric in ("grad_norm", "act_nan"):
            arr = cur.modules.get(metric)
            if arr is None:
                continue
            if metric == "act_nan":
                bad = np.nan_to_num(arr, nan=0.0) > 0
            else:
                present = cur.modules.get("grad_present")
                bad = np.isinf(arr)
                if present is not None:
                    bad |= np.isnan(arr) & (present > 0)
            if bad.any():
                leaf = bad & own[: len(bad)]
                i = int(first) if first is not None and not math.isnan(first) else int(np.argmax(leaf if leaf.any() else bad))
                what = "non-finite gradients" if metric == "grad_norm" else "non-finite output"
                return Fired("nan_inf", f"{what} in {h.names[i]!r}", module=h.names[i], condition="nan_count > 0")
        return None

    return check


def vanishing(t: Thresholds, weighted: np.ndarray, numel: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        norms = cur.modules.get("grad_norm")
        if norms is None:
            return None
        ids = _layer_ids(h, weighted)
        mean_abs = cur.modules.get("grad_mean")
        with np.errstate(invalid="ignore", divide="ignore"):
            # mean |grad| when sampled; the RMS (>= mean |grad|) otherwise
            level = mean_abs if mean_abs is not None else norms / np.sqrt(numel)
            vals = np.array([level[i] for i in ids])
        ok = np.isfinite(vals) & (vals > 0)
        if ok.sum() < 2:
            return None
        top = vals[ok].max()
        for k, i in enumerate(ids):
            v = vals[k]
            if not ok[k]:
                continue
            ratio = v / top
            # absolute smallness alone may be convergence, relative smallness alone may be another
            # layer exploding: vanishing is a layer both tiny and far below the others
            if v < t.vanishing_mean_grad and ratio < 0.1:
                return Fired("vanishing", f"mean |grad| of {h.names[i]!r} is {v:.3g} ({ratio:.2g} of the largest layer's)",
                             module=h.names[i], value=float(v), condition=f"grad_mean < {t.vanishing_mean_grad:g}")
        return None

    return check


def dead_units(t: Thresholds, weighted: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        norms = cur.modules.get("grad_norm")
        if norms is not None:
            ids = _layer_ids(h, weighted)
            live = [i for i in ids if np.isfinite(norms[i])]
            if len(live) >= 2 and any(norms[i] > 0 for i in live):
                for i in live:
                    if norms[i] == 0:
                        return Fired("dead_units", f"every gradient of {h.names[i]!r} is exactly zero: its units are dead",
                                     module=h.names[i], value=1.0, condition="grad_zero_frac == 1")
        for metric, limit in (("dead_frac", t.dead_units_frac), ("in_dead_frac", t.dead_units_frac), ("grad_zero_frac", t.dead_grad_frac)):
            arr = cur.modules.get(metric)
            if arr is None:
                continue
            if metric == "grad_zero_frac":
                arr = np.where(weighted[: len(arr)], arr, np.nan)
            with np.errstate(invalid="ignore"):
                hit = np.nan_to_num(arr, nan=-1.0) >= limit
            if hit.any():
                i = int(np.argmax(np.nan_to_num(arr, nan=-1.0)))
                what = {"dead_frac": "of its units are dead", "in_dead_frac": "of its input units are dead",
                        "grad_zero_frac": "of its gradients are exactly zero"}[metric]
                return Fired("dead_units", f"{arr[i]:.0%} {what} in {h.names[i]!r}", module=h.names[i], value=float(arr[i]),
                             condition=f"{metric if metric != 'in_dead_frac' else 'dead_frac'} >= {limit:g}")
        return None

    return check


def condition_check(cond: Condition, name: str, scope: str | None = None) -> Check:
    """A user's condition; ``scope`` (a module name or glob) applies to unscoped layer metrics."""

    def check(h: History) -> Fired | None:
        if scope is None:
            hits = cond.matches(h, h.names)
            if hits:
                module = hits[0] if hits[0] is not None else (next(iter(cond.layers)) if len(cond.layers) == 1 else None)
                return Fired(name, f"{cond.text} holds", module=module, condition=cond.text, value=_shown(h, cond, hits[0], None))
            return None
        for module in h.names:
            if fnmatch.fnmatchcase(module, scope) and cond.matches(h, h.names, scope=module):
                return Fired(name, f"{cond.text} holds for {module!r}", module=module, condition=cond.text,
                             value=_shown(h, cond, None, module))
        return None

    return check


def _shown(h: History, cond: Condition, binding: str | None, scope: str | None) -> float | None:
    """The value of the condition's first metric, for messages."""
    metrics = sorted(cond.metrics)
    if not metrics:
        return None
    metric = metrics[0]
    module = None if metric in ("loss", "step", "lr") else (scope or binding)
    if module is None:
        for layer in cond.layers:
            if not any(c in layer for c in "*?["):
                module = layer
    return h.value(metric, module)


def build(names: list[str], t: Thresholds, own: np.ndarray, weighted: np.ndarray, numel: np.ndarray, rearm: int) -> dict[str, Trigger]:
    checks: dict[str, Check] = {
        "loss_spike": loss_spike(t),
        "grad_explode": grad_explode(t, own),
        "nan_inf": nan_inf(t, own),
        "vanishing": vanishing(t, weighted, numel),
        "dead_units": dead_units(t, weighted),
    }
    return {k: Trigger(k, v, rearm) for k, v in checks.items()}


def parse_trigger_list(spec: list[str]) -> tuple[list[str], list[Condition]]:
    """Split ``--trigger`` values into built-in names and conditions (raising ConditionError)."""
    names: list[str] = []
    conds: list[Condition] = []
    for item in spec:
        for part in _split_commas(item):
            if part in BUILTIN:
                names.append(part)
            elif part in ("all", "default"):
                names.extend(BUILTIN)
            elif part == "none":
                continue
            elif part.isidentifier() and part not in ("loss",):
                raise ValueError(f"unknown trigger {part!r}; built-in triggers are {', '.join(BUILTIN)}, or give a condition such as 'grad_norm > 50'")
            else:
                conds.append(parse(part))
    return list(dict.fromkeys(names)), conds


def _split_commas(text: str) -> list[str]:
    """Split on commas outside parentheses and quotes (conditions may contain ``mean(loss, 10)``)."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out
