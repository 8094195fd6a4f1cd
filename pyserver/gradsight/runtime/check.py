"""``gradsight.check("grad_norm > 50")``: the condition of a VS Code conditional breakpoint.

debugpy evaluates it each time the line runs; it computes, from the caller's
frame, what the condition needs (the gradients as they are now, the loss of
this step) and returns True on the step where the condition holds. It never
raises: a bad condition is reported once, and it then returns False.
"""

from __future__ import annotations

import sys
import weakref
from types import FrameType
from typing import Any

import numpy as np
import torch
from torch import nn

from ..conditions import Condition, ConditionError, parse
from ..store import EVENT_BREAKPOINT
from . import gradstats as gs
from . import session as _session
from .layout import Layout
from .triggers import History, StepValues

_DETAIL = {"grad_mean", "grad_zero_frac", "weight_norm"}
_parsed: dict[str, Condition | ConditionError] = {}
_reported: set[str] = set()


class _Probe:
    """Gradient metrics of a model found in the caller's frame, when no session watches it."""

    def __init__(self, model: nn.Module) -> None:
        self.layout = Layout.from_model(model)
        self.history = History(self.layout.names)
        self.calls = 0


_probes: weakref.WeakKeyDictionary[nn.Module, _Probe] = weakref.WeakKeyDictionary()


def _say_once(key: str, message: str) -> None:
    if key not in _reported:
        _reported.add(key)
        print(f"gradsight.check: {message}", file=sys.stderr, flush=True)


def _find(frame: FrameType, kind: type) -> Any:
    best, size = None, -1
    for scope in (frame.f_locals, frame.f_globals):
        for value in list(scope.values()):
            if isinstance(value, kind):
                n = sum(p.numel() for p in value.parameters()) if isinstance(value, nn.Module) else 0
                if n > size:
                    best, size = value, n
        if best is not None:
            return best
    return None


def _frame_loss(frame: FrameType) -> float | None:
    v = frame.f_locals.get("loss")
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return float(v.detach())
    if isinstance(v, (int, float)):
        return float(v)
    return None


def check(condition: str, depth: int = 1) -> bool:
    """True on the step where ``condition`` holds; never raises (a bad condition is said once, then False)."""
    try:
        key = condition if isinstance(condition, str) else repr(condition)
        cached = _parsed.get(key)
        if cached is None:
            try:
                cached = parse(condition)
            except ConditionError as exc:
                cached = exc
            _parsed[key] = cached
        if isinstance(cached, ConditionError):
            _say_once(key, f"bad condition {key!r}\n{cached}")
            return False
        return _check(cached, sys._getframe(depth))
    except Exception as exc:  # never break the user's program from a breakpoint condition
        _say_once(f"error:{condition!r}", f"could not evaluate {condition!r}: {exc!r}")
        return False


def _check(cond: Condition, frame: FrameType) -> bool:
    active = _session.ACTIVE
    if active is not None and not active.closed and active.watched is not None:
        active.stay_in_step()
        layout, past, step = active.watched.layout, active.watched.history, active.step
        so_far = active.current_loss()
        loss = so_far if so_far is not None else _frame_loss(frame)
    else:
        model = _find(frame, nn.Module)
        if model is None:
            _say_once("nomodel", "no torch.nn.Module found in the frame of the breakpoint, and no session is watching one")
            return False
        probe = _probes.get(model)
        if probe is None:
            probe = _probes[model] = _Probe(model)
        layout, past, step = probe.layout, probe.history, probe.calls
        probe.calls += 1
        loss = _frame_loss(frame)
    t = gs.Transfer()
    idx = gs.queue_grads(layout, t, sampled=bool(cond.metrics & _DETAIL))
    sample = gs.read_grads(layout, t.fetch(), idx)
    mods = gs.per_module(layout, sample)
    with np.errstate(invalid="ignore", over="ignore"):
        present = sample.present
        gnorm = float(np.sqrt(np.sum(np.where(present, sample.l2, 0.0) ** 2))) if present.any() else float("nan")
        gmax = float(np.nanmax(sample.linf)) if sample.linf is not None and present.any() else float("nan")
    scalars = {"step": float(step), "loss": float("nan") if loss is None else loss, "grad_norm": gnorm, "grad_max": gmax}
    for kind in ("grad_mean", "grad_zero_frac", "weight_norm"):
        if kind in mods:
            scalars[kind] = float(mods[kind][0])
    current = StepValues(step, scalars, mods)
    view = History(layout.names, maxlen=past.steps.maxlen or 64)
    view.steps.extend(s for s in past.steps if s.step != step)
    view.push(current)
    if active is None or active.closed:
        past.push(current)
    hits = cond.matches(view, layout.names)
    if not hits:
        return False
    where = f" in {hits[0]!r}" if hits[0] else ""
    print(f"gradsight: {cond.text} holds{where} at step {step} (grad_norm={gnorm:.4g})", file=sys.stderr, flush=True)
    if active is not None and not active.closed:
        active.writer.put_event(step, EVENT_BREAKPOINT, "check", module=hits[0], condition=cond.text, value=gnorm,
                                message=f"conditional breakpoint {cond.text} held")
    return True
