"""Whether gradients reach the parameters, and whether the updates reach the weights.

A trainable parameter the optimizer holds learns only if, at the optimizer's step, it has a gradient and the
step changes it. Three ways this fails, told apart by what the records show:

- no parameter has a gradient at any step although backward runs: the loop loses them (``zero_grad()``
  between ``backward()`` and ``step()``, or ``step()`` before ``backward()``), so nothing is updated: the
  optimizer's ``not_updated``;
- some layers never get one: the graph is cut before them (a ``detach()`` or ``no_grad`` in the forward), or
  the forward never calls them: named at the topmost module whose trainable layers all lack one;
- gradients are there but the weights never move (updates rounded away in low precision): ``not_updated``.
"""

from __future__ import annotations

import numpy as np

from .. import kinds
from .data import ADAPTIVE, RunData
from .findings import Finding

MIN_AFFECTED = 0.02  # layers holding less than this share of the parameters are not worth an error


def _trainable_layers(d: RunData) -> dict[int, int]:
    """Layers (leaf modules with parameters) whose parameters are trainable and held by an optimizer -> their numel."""
    out: dict[int, int] = {}
    layers = set(d.own_layers())
    for p in d.params:
        if p["trainable"] and p["in_optimizer"] and p["module_id"] in layers:
            out[p["module_id"]] = out.get(p["module_id"], 0) + int(p["numel"])
    return out


def _got_gradient(d: RunData, layers: list[int]) -> tuple[dict[int, float], dict[int, float]]:
    """Share of the steps at which each layer has a gradient at the optimizer's step, and a non-zero one
    (a gradient that is there but zero is dead units' doing, or zero_grad(set_to_none=False)'s)."""
    steps, g = d.metric("grad_norm")
    if not g.size:
        return {}, {}
    # a non-finite loss gives non-finite gradients, which read as missing: only steps with a finite loss tell
    at = np.searchsorted(d.steps["step"], steps).clip(0, max(0, d.n_steps - 1))
    finite = np.isfinite(d.steps["loss"][at]) if d.n_steps else np.zeros(len(steps), dtype=bool)
    if not finite.any():
        return {}, {}
    g = g[finite]
    there, nonzero = {}, {}
    for i in layers:
        col = g[:, i].astype(np.float64)
        there[i] = float(np.mean(np.isfinite(col))) if len(col) else 0.0
        nonzero[i] = float(np.mean(np.isfinite(col) & (col > 0))) if len(col) else 0.0
    return there, nonzero


def _called(d: RunData, i: int) -> bool | None:
    """Whether the forward calls module ``i`` (its outputs were measured), None when nothing was measured."""
    _, act = d.metric("act_max")
    _, mode = d.metric("training")
    if not act.size and not mode.size:
        return None
    seen = (act.size and np.isfinite(act[:, i]).any()) or (mode.size and np.isfinite(mode[:, i]).any())
    return bool(seen)


def _topmost(d: RunData, cut: set[int], trainable: dict[int, int]) -> list[int]:
    """The highest modules (below the root) all of whose trainable layers are in ``cut``."""
    by_name = {m.name: m.id for m in d.modules}
    under: dict[int, set[int]] = {}
    for i in trainable:
        name = d.modules[i].name
        while True:
            under.setdefault(by_name[name], set()).add(i)
            if not name:
                break
            name = name.rpartition(".")[0]
    out = []
    for i in cut:
        top = i
        name = d.modules[i].name
        while name:
            parent = name.rpartition(".")[0]
            if not parent or not under.get(by_name[parent], set()) <= cut:
                break
            top, name = by_name[parent], parent
        if top not in out:
            out.append(top)
    return out


def _meant_update(d: RunData, i: int) -> float:
    """The relative size of the update the optimizer means to give layer ``i`` (lr * mean|g| / RMS(W); an adaptive
    optimizer's normalised step: lr / RMS(W)): updates this small round away legitimately."""
    lr = d.steps["lr"]
    rate = float(np.nanmedian(lr)) if np.isfinite(lr).any() else 0.0
    _, w = d.metric("weight_norm")
    _, gm = d.metric("grad_mean")
    numel = max(1, d.modules[i].own_params)
    if not w.size or not np.isfinite(w[:, i]).any():
        return float("inf")
    rms = float(np.nanmedian(w[:, i])) / np.sqrt(numel)
    if rms <= 0:
        return float("inf")
    if d.optimizer_type in ADAPTIVE:
        return rate / rms
    g = float(np.nanmedian(gm[:, i])) if gm.size and np.isfinite(gm[:, i]).any() else 0.0
    return rate * g / rms


def _output_blocked(d: RunData) -> bool:
    """The model's last modules pass no gradient back: all their units dead (a ReLU on the output) or their sigmoid
    or tanh saturated. Gradients that are exactly zero everywhere then come from the forward, not from a loop that
    loses them."""
    rank = d.forward_rank()
    ran = sorted((m for m in d.modules if m.forward_order is not None and m.name), key=lambda m: rank[m.id])
    tail = [m.id for m in ran[-3:]]
    for kind in ("dead_frac", "sat_frac"):
        _, mat = d.metric(kind)
        if not mat.size:
            continue
        for i in tail:
            col = mat[:, i].astype(np.float64)
            col = col[np.isfinite(col)]
            if len(col) and float(np.median(col)) >= 0.99:
                return True
    return False


def detect(d: RunData) -> list[Finding]:
    out: list[Finding] = []
    trainable = _trainable_layers(d)
    if not trainable or not d.n_steps:
        return out
    got, nonzero = _got_gradient(d, list(trainable))
    if not got:
        return out
    total = sum(trainable.values())
    first = int(d.steps["step"][0])
    # a layer whose parameters did get a gradient (a non-finite one reads as missing in grad_norm) is not cut off
    had = {p["module_id"] for p in d.params if p.get("got_grad") == 1}
    never = {i for i, share in got.items() if share == 0.0 and i not in had}
    zero = {i for i, share in nonzero.items() if share == 0.0}
    backward = np.nan_to_num(d.steps.get("n_backward", np.zeros(d.n_steps)), nan=0.0)
    if (never == set(trainable) or (zero == set(trainable) and not _output_blocked(d))) and float(np.mean(backward >= 1)) >= 0.5:
        # backward gives the gradients; the step never sees them: nothing is updated
        out.append(Finding(kinds.OPTIMIZER, kinds.NOT_UPDATED, "error",
                           f"backward() runs at every step, but when optimizer.step() runs no parameter has a gradient "
                           f"(none of {len(trainable)} layers, at any of {d.n_steps} steps): the loop loses them between "
                           "backward and step (zero_grad() after backward(), or step() before it)", 1.0, first))
        return out
    if never:
        rank = d.forward_rank()
        for top in sorted(_topmost(d, never, trainable), key=lambda i: rank[i]):
            cut = [i for i in never if d.modules[i].name == d.modules[top].name or d.modules[i].name.startswith(d.modules[top].name + ".")
                   or not d.modules[top].name]
            share = sum(trainable[i] for i in cut) / total
            called = [_called(d, i) for i in cut]
            if called and all(c is False for c in called):
                why = "the forward never calls it"
            else:
                why = "the graph is cut before the loss (a detach() or torch.no_grad() in the forward?)"
            names = ", ".join(repr(d.modules[i].name) for i in sorted(cut, key=lambda i: rank[i])[:4])
            severity = "error" if share >= MIN_AFFECTED else "warning"
            out.append(Finding(d.modules[top].name, kinds.NO_GRADIENT, severity,
                               f"{len(cut)} trainable layer{'s' if len(cut) > 1 else ''} the optimizer holds ({names}; "
                               f"{share:.0%} of the parameters) never get a gradient: {why}", min(1.0, 0.6 + share), first))
    # gradients but no change: the optimizer's updates are lost (below the weights' precision), where the
    # update the optimizer means to make is not itself too small to see
    steps, upd = d.metric("update_ratio")
    if upd.size:
        for i, share in nonzero.items():
            if share < 0.5 or i in never:
                continue
            col = upd[:, i].astype(np.float64)
            fin = col[np.isfinite(col)]
            if len(fin) >= 1 and float(np.max(fin)) == 0.0 and _meant_update(d, i) >= 1e-5:
                out.append(Finding(d.modules[i].name, kinds.NOT_UPDATED, "error",
                                   f"its gradients are non-zero at every step but the optimizer's steps never change its weights "
                                   f"(update ratio exactly 0 on {len(fin)} measured steps): the updates are below the weights' "
                                   "precision (weights in bf16/fp16?)", 0.9, int(steps[np.flatnonzero(np.isfinite(col))[0]])))
    return out
