"""Step values: from a step's host-side collection to the numbers triggers and conditions read.

Plain numbers only (numpy over module ids): the global gradient norm and max, the loss, the
whole-model values of layer metrics, NaN/Inf counts and the first module with a non-finite output.
"""

from __future__ import annotations

import math

import numpy as np

from . import activations as act
from . import gradstats as gs
from .collect import Collected
from .layout import Layout
from .triggers import StepValues

# how an activation statistic of the whole model follows from its modules' values
_WHOLE_MODEL = {"act_max": "max", "act_min": "min", "act_std": "max", "dead_frac": "max", "sat_frac": "max", "act_mean": "mean"}


def loss_of(c: Collected) -> float | None:
    """The step's loss: the explicit one, else the mean of its loss values (see losses.StepLoss)."""
    if c.explicit_loss is not None:
        return c.explicit_loss
    if c.losses is None or not len(c.losses):
        return None
    if len(c.losses) == 1:
        return float(c.losses[0]) * c.loss_factor
    return float(c.losses.astype(np.float64).mean()) * c.loss_factor


def global_norms(c: Collected) -> tuple[float | None, float | None]:
    """(global L2 norm, max |grad|) of the step's gradients (None: no gradient)."""
    s = c.sample
    present = s.present
    if s.all_present:  # the root module holds every parameter: its norm is the global one
        gnorm: float | None = float(c.mods["grad_norm"][0]) if len(s.l2) else None
    else:
        gnorm = math.sqrt(float(np.nansum(np.where(present, s.l2 * s.l2, 0.0)))) if present.any() else None
    gmax = float(np.max(np.where(np.isnan(s.linf), -np.inf, s.linf))) if s.linf is not None and present.any() else None
    return gnorm, gmax


def step_values(c: Collected, layout: Layout, *, loss: float | None, gnorm: float | None, gmax: float | None, loss_scale: float,
                nonfinite_counts: np.ndarray | None, update_ratio: np.ndarray | None) -> StepValues:
    """The step's scalars and per-module arrays; ``c.mods`` gains the activation statistics."""
    mods = c.mods
    scalars: dict[str, float] = {"step": float(c.step), "loss": _nan(loss), "lr": _nan(c.lr), "loss_scale": loss_scale,
                                 "grad_norm": _nan(gnorm), "grad_max": _nan(gmax),
                                 "loss_nonfinite": float(loss is not None and not math.isfinite(loss)),
                                 "grad_nonfinite": float(gnorm is not None and not math.isfinite(gnorm)),
                                 "first_nonfinite_module": math.nan, "skipped": float(c.skipped)}
    if scalars["grad_nonfinite"] and nonfinite_counts is not None:
        mods["nan_count"] = layout.member @ nonfinite_counts
    if c.act_ids:
        acts, first_bad = act.aggregate(layout.n_modules, c.act_ids, c.host["act"])
        mods.update(acts)
        mods["nan_count"] = mods.get("nan_count", 0.0) + np.fmax(acts["act_nan"], 0.0)  # (fmax: NaN -> 0)
        if first_bad is not None:
            scalars["first_nonfinite_module"] = float(first_bad)
    if update_ratio is not None:
        mods["update_ratio"] = update_ratio
    if c.sampled or len(mods) > 2:
        whole_model(scalars, mods, layout)
    else:
        scalars["nan_count"] = scalars["grad_nonfinite"]
    if c.skipped:  # the scaler skipped the step: its gradients (inf/NaN by design) are not evidence
        for key in ("grad_norm", "grad_max", "grad_nonfinite", "nan_count"):
            scalars[key] = math.nan if key not in ("grad_nonfinite", "nan_count") else 0.0
        mods = {k: v for k, v in mods.items() if not k.startswith("grad_") and k != "nan_count"}
    return StepValues(c.step, scalars, mods)


def nonfinite_counts(layout: Layout, c: Collected, current: bool) -> np.ndarray | None:
    """NaN/Inf per parameter when a norm is not finite: counted in the gradients when they are the
    step's own (``current``); for a deferred step, whose gradients are gone, one per non-finite norm."""
    s = c.sample
    if np.isfinite(s.l2[s.present]).all():
        return None
    if current:
        return gs.nonfinite_counts(layout, s)
    return np.where(s.present & ~np.isfinite(s.l2), 1.0, 0.0)


def whole_model(scalars: dict[str, float], mods: dict[str, np.ndarray], layout: Layout) -> None:
    """Whole-model values of layer metrics, read by unscoped conditions."""
    with np.errstate(invalid="ignore", divide="ignore"):
        root = 0  # the root module contains every parameter
        for kind in ("grad_mean", "grad_zero_frac", "weight_norm", "update_ratio"):
            if kind in mods and len(mods[kind]):
                scalars[kind] = float(mods[kind][root])
        kinds = [k for k in _WHOLE_MODEL if k in mods]
        if kinds:  # one reduction per statistic over all of them (NaN: no value), not one per kind
            table = np.stack([mods[k] for k in kinds])
            finite = np.isfinite(table).any(axis=1)
            high, low = np.fmax.reduce(table, axis=1), np.fmin.reduce(table, axis=1)
            known = ~np.isnan(table)
            mean = np.where(known, table, 0.0).sum(axis=1) / known.sum(axis=1)
            for r, kind in enumerate(kinds):
                if finite[r]:
                    how = _WHOLE_MODEL[kind]
                    scalars[kind] = float(high[r] if how == "max" else low[r] if how == "min" else mean[r])
        if "nan_count" in mods:
            own = layout.owns_params  # each parameter counted once, at its owner
            scalars["nan_count"] = float(np.nansum(np.where(own, mods["nan_count"], 0.0)))
        else:
            scalars["nan_count"] = 0.0 if math.isfinite(scalars.get("grad_norm", 0.0)) else 1.0


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)
