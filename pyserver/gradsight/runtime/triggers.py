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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..conditions import Condition, parse
from ..thresholds import Thresholds

BUILTIN = ("loss_spike", "grad_explode", "nan_inf", "vanishing", "dead_units")
LAYER_TRIGGERS = ("grad_explode", "nan_inf", "vanishing", "dead_units")  # those a quiet step (QuickCheck) cannot fire


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


class QuickCheck:
    """One vectorized look at a step that tells when none of the layer-based built-in triggers can fire,
    so a quiet step skips their checks (most steps are quiet)."""

    def __init__(self, t: Thresholds, layers: np.ndarray, weighted: np.ndarray, numel: np.ndarray) -> None:
        self.t = t
        self._n_layers, self._n_weighted = len(layers), len(weighted)
        # masks over all modules, so that each test is one masked reduction (a step's hook pays per call)
        self._layer_mask = np.zeros(len(numel), dtype=bool)
        self._layer_mask[layers] = True
        self._weighted_mask = np.zeros(len(numel), dtype=bool)
        self._weighted_mask[weighted] = True
        self._weighted_mask &= numel > 0  # a layer whose weight is tied to another's holds none: its norm is NaN
        self._inv_root_numel = np.where(self._weighted_mask, 1.0 / np.sqrt(np.maximum(numel, 1.0)), 0.0)

    def quiet(self, h: History) -> bool:
        cur = h.current
        if len(cur.modules) > 2 or cur.scalars.get("loss_nonfinite") or cur.scalars.get("grad_nonfinite"):
            return False  # a sampled step or non-finite values: look closely
        g = cur.scalars.get("grad_norm")
        if g is not None and g > self.t.global_grad_norm:
            return False
        norms = cur.modules.get("grad_norm")
        if norms is None:
            return True
        if self._n_layers and not norms.max(where=self._layer_mask, initial=-np.inf) <= self.t.layer_grad_norm:  # NaN: not quiet
            return False
        if self._n_weighted >= 2:
            low = (norms * self._inv_root_numel).min(where=self._weighted_mask, initial=np.inf)
            if not low >= self.t.vanishing_mean_grad:  # zero (dead) or tiny (vanishing) or NaN
                return False
        return True


class Trigger:
    """A check with a latch: after it fires it re-arms once the check has not held for ``rearm`` steps.

    ``needs``: a metric measured on sampled steps only. A step without it cannot show the condition,
    so it does not count towards re-arming: a persistent condition seen on sampled steps fires once,
    not at every sampled step."""

    def __init__(self, name: str, check: Check, rearm: int, needs: str | None = None) -> None:
        self.name = name
        self.check = check
        self.rearm = max(1, rearm)
        self.needs = needs
        self._quiet = self.rearm  # steps since the check last held
        self.fired = 0

    def __call__(self, history: History) -> Fired | None:
        hit = self.check(history)
        if hit is None:
            self.quiet_step(history)
            return None
        ready = self._quiet >= self.rearm
        self._quiet = 0
        if not ready:
            return None
        self.fired += 1
        return hit

    def quiet_step(self, history: History) -> None:
        if self.needs is not None and self.needs not in history.current.modules:
            return
        self._quiet += 1


# metrics measured on sampled steps only (activation statistics and the finer gradient statistics)
SAMPLED_ONLY = frozenset({"act_min", "act_max", "act_mean", "act_std", "act_zero_frac", "dead_frac", "sat_frac", "in_dead_frac",
                          "grad_mean", "grad_max", "grad_zero_frac", "weight_norm", "update_ratio"})


def condition_needs(cond: Condition) -> str | None:
    """The sampled-only metric a condition reads, if any (see :class:`Trigger`)."""
    wanted = sorted(cond.metrics & SAMPLED_ONLY)
    return wanted[0] if wanted else None


def loss_spike(t: Thresholds) -> Check:
    past: deque[float] = deque(maxlen=t.loss_spike_window)
    start: list[float] = []  # the first losses: the run's scale

    def check(h: History) -> Fired | None:
        loss = h.current.scalars.get("loss")
        if loss is None or math.isnan(loss):
            return None
        hit = None
        floor = t.loss_spike_floor * (sorted(start)[len(start) // 2] if start else 0.0)
        if len(past) >= max(3, t.loss_spike_window // 2):
            mean = sum(past) / len(past)
            if mean > 0 and loss > t.loss_spike_factor * mean and loss > floor:
                hit = Fired("loss_spike", f"loss {loss:.4g} is {loss / mean:.1f}x its {len(past)}-step mean {mean:.4g}",
                            value=loss, condition=f"loss > {t.loss_spike_factor:g} * mean(loss, {t.loss_spike_window})")
        if math.isfinite(loss):
            past.append(loss)
            if len(start) < t.loss_spike_window:
                start.append(abs(loss))
        return hit

    return check


def _learning(cur: StepValues, share: float = 0.01) -> bool:
    """False once the loss is ~0 against its starting level (below ``share`` of it): tiny or exactly-zero
    gradients are then convergence (and underflow), not vanishing gradients or dead units."""
    loss, scale = cur.scalars.get("loss"), cur.scalars.get("loss_scale")
    if loss is None or scale is None or math.isnan(loss) or math.isnan(scale) or scale <= 0:
        return True
    return abs(loss) > share * scale


def _first_max(values: np.ndarray) -> tuple[int, float]:
    clean = np.where(np.isfinite(values), values, -np.inf)
    k = int(np.argmax(clean))
    return k, float(clean[k])


def grad_explode(t: Thresholds, layers: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        norms = cur.modules.get("grad_norm")
        if norms is not None and len(layers):
            vals = norms[layers]
            top = vals.max()  # NaN if any is NaN: then look closer
            if top != top:
                k, top = _first_max(vals)
            else:
                k = -1
            if top > t.layer_grad_norm:
                k = k if k >= 0 else int(np.argmax(vals))
                i = int(layers[k])
                return Fired("grad_explode", f"gradient norm of {h.names[i]!r} is {top:.4g} > {t.layer_grad_norm:g}",
                             module=h.names[i], value=top, condition=f"grad_norm > {t.layer_grad_norm:g}")
        g = cur.scalars.get("grad_norm")
        if g is not None and math.isfinite(g) and g > t.global_grad_norm:
            return Fired("grad_explode", f"global gradient norm {g:.4g} > {t.global_grad_norm:g}", value=g,
                         condition=f"grad_norm > {t.global_grad_norm:g}")
        return None

    return check


def nan_inf(t: Thresholds, layers: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        loss = cur.scalars.get("loss")
        act_nan = cur.modules.get("act_nan")
        bad_loss = cur.scalars.get("loss_nonfinite") == 1.0
        # a step the GradScaler skipped had inf/NaN gradients by design: the scaler handles them
        bad_grad = cur.scalars.get("grad_nonfinite") == 1.0 and not cur.scalars.get("skipped")
        bad_act = act_nan is not None and bool(np.nan_to_num(act_nan, nan=0.0).any())
        if not (bad_loss or bad_grad or bad_act):
            return None
        first = cur.scalars.get("first_nonfinite_module")
        module = None
        if first is not None and not math.isnan(first):
            module = h.names[int(first)]
        elif bad_grad:
            norms = cur.modules.get("grad_norm")
            if norms is not None and len(layers):
                bad = ~np.isfinite(norms[layers])
                if bad.any():
                    module = h.names[int(layers[int(np.argmax(bad))])]
        what = f"loss is {loss}" if bad_loss else "non-finite gradients" if bad_grad else "non-finite activations"
        return Fired("nan_inf", what + (f" (first in {module!r})" if module else ""), module=module,
                     value=loss if bad_loss else None, condition="nan_count > 0")

    return check


def vanishing(t: Thresholds, weighted: np.ndarray, numel: np.ndarray) -> Check:
    root_numel = np.sqrt(numel[weighted]) if len(weighted) else np.zeros(0)

    def check(h: History) -> Fired | None:
        cur = h.current
        norms = cur.modules.get("grad_norm")
        if norms is None or len(weighted) < 2 or not _learning(cur, t.converged_share):
            return None
        mean_abs = cur.modules.get("grad_mean")
        with np.errstate(invalid="ignore", divide="ignore"):
            # mean |grad| when sampled; the RMS (>= mean |grad|) otherwise
            vals = mean_abs[weighted] if mean_abs is not None else norms[weighted] / root_numel
            low = vals.min()
            if low >= t.vanishing_mean_grad:  # the common case: nothing near vanishing (False for NaN)
                return None
            ok = np.isfinite(vals) & (vals > 0)
            if ok.sum() < 2:
                return None
            top = vals[ok].max()
            # absolute smallness alone may be convergence, relative smallness alone another layer
            # exploding: vanishing is a layer both tiny and far below the others
            cand = ok & (vals < t.vanishing_mean_grad) & (vals < 0.1 * top)
        if not cand.any():
            return None
        k = int(np.argmax(cand))
        i, v = int(weighted[k]), float(vals[k])
        return Fired("vanishing", f"mean |grad| of {h.names[i]!r} is {v:.3g} ({v / top:.2g} of the largest layer's)",
                     module=h.names[i], value=v, condition=f"grad_mean < {t.vanishing_mean_grad:g}")

    return check


def dead_units(t: Thresholds, weighted: np.ndarray) -> Check:
    def check(h: History) -> Fired | None:
        cur = h.current
        norms = cur.modules.get("grad_norm")
        if not _learning(cur):  # units off once the loss is ~0: a sparse solution, not a failure to learn
            return None
        low = 1.0
        if norms is not None and len(weighted) >= 2:
            vals = norms[weighted]
            low = vals.min()
        if norms is not None and len(weighted) >= 2 and not low > 0:  # some layer at exactly zero (or NaN)
            finite = np.isfinite(vals)
            zero = finite & (vals == 0)
            if zero.any() and (vals[finite] > 0).any():
                i = int(weighted[int(np.argmax(zero))])
                return Fired("dead_units", f"every gradient of {h.names[i]!r} is exactly zero: its units are dead",
                             module=h.names[i], value=1.0, condition="grad_zero_frac == 1")
        if "dead_frac" not in cur.modules and "grad_zero_frac" not in cur.modules:
            return None  # not a sampled step
        for metric, limit in (("dead_frac", t.dead_units_frac), ("in_dead_frac", t.dead_units_frac), ("grad_zero_frac", t.dead_grad_frac)):
            arr = cur.modules.get(metric)
            if arr is None:
                continue
            if metric == "in_dead_frac" and len(weighted):
                arr = arr.copy()
                arr[int(weighted[0])] = np.nan  # the first layer's input is the data (sparse features are not dead units)
            if metric == "grad_zero_frac":
                inputs = cur.modules.get("in_dead_frac")
                if inputs is None:
                    continue  # without the inputs' zeros, zero gradients of sparse inputs would read as dead units
                masked = np.full(len(arr), np.nan)
                masked[weighted] = arr[weighted] - np.nan_to_num(inputs[weighted], nan=0.0)  # (zero input columns: zero gradients)
                arr = masked
            k, top = _first_max(arr)
            if top >= limit:
                what = {"dead_frac": "of its units are dead", "in_dead_frac": "of its input units are dead",
                        "grad_zero_frac": "of its gradients are exactly zero"}[metric]
                return Fired("dead_units", f"{top:.0%} {what} in {h.names[k]!r}", module=h.names[k], value=top,
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
    """The built-in triggers. ``own``/``weighted`` are boolean masks over modules."""
    layers = np.flatnonzero(own)
    weighted_ids = np.flatnonzero(weighted)
    checks: dict[str, Check] = {
        "loss_spike": loss_spike(t),
        "grad_explode": grad_explode(t, layers),
        "nan_inf": nan_inf(t, layers),
        "vanishing": vanishing(t, weighted_ids, numel),
        "dead_units": dead_units(t, weighted_ids),
    }
    return {k: Trigger(k, v, rearm, needs="grad_zero_frac" if k == "dead_units" else None) for k, v in checks.items()}


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
