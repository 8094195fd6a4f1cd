"""The optimizer's side: the learning rate over the run, clipping, Adam's eps, weight decay and weight penalties.

Each rule compares what the optimizer was told (its hyperparameters, recorded per parameter group) with what
the run shows (the rate at each step, the gradients before clipping, their RMS, the weights' norms, the
gradient's direction against the weights) and with the loss: a setting is a fault when its mechanism is at
work *and* training suffers, so a schedule that peaks and anneals, or an ordinary clip, is left alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kinds
from ..thresholds import Thresholds
from .data import ADAPTIVE, RunData
from .findings import Finding
from .losscurve import LossCurve

ADAM_LIKE = {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "SparseAdam", "Adafactor", "RMSprop", "Adagrad", "Adadelta"}
COUPLED_DECAY = {"SGD", "Adam", "RMSprop", "Adagrad", "NAdam", "RAdam", "Adamax"}  # weight_decay adds wd * W to the gradient


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def progress(curve: LossCurve) -> float:
    """How much of its start the loss lost: 1 - tail / head (NaN when unknown)."""
    if not (math.isfinite(curve.head) and math.isfinite(curve.tail)) or curve.head <= 0:
        return math.nan
    return 1.0 - curve.tail / curve.head


def _poor(curve: LossCurve, t: Thresholds) -> bool:
    p = progress(curve)
    return curve.not_decreasing or not math.isfinite(p) or p < 1.0 - t.loss_progress_poor


def _ends_badly(d: RunData, curve: LossCurve) -> bool:
    """The run ends worse than it was at its best: diverged, non-finite, or well above its lowest loss."""
    loss = d.steps["loss"]
    fin = loss[np.isfinite(loss)]
    if len(fin) < len(loss) * 0.9 or (len(loss) and not np.isfinite(loss[-max(1, len(loss) // 10):]).all()):
        return True
    if len(fin) < 10:
        return False
    k = max(3, len(fin) // 10)
    smooth = np.convolve(fin, np.ones(k) / k, mode="valid")
    return bool(smooth[-1] > 2.0 * smooth.min() and smooth[-1] > fin[: max(3, len(fin) // 10)].mean() * 0.8) or curve.diverging


def _best_early(d: RunData) -> bool:
    """The smoothed loss was lowest in the first half of the run."""
    fin = d.steps["loss"][np.isfinite(d.steps["loss"])]
    if len(fin) < 10:
        return False
    k = max(3, len(fin) // 10)
    smooth = np.convolve(fin, np.ones(k) / k, mode="valid")
    return bool(np.argmin(smooth) < 0.5 * len(smooth))


def _groups(d: RunData) -> list[dict[str, Any]]:
    opts = d.optimizers
    groups = opts[0].get("groups", []) if opts else []
    return [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []


def _floats(d: RunData, key: str) -> list[float]:
    """A hyperparameter's value in each parameter group that has it."""
    return [float(g[key]) for g in _groups(d) if isinstance(g.get(key), (int, float)) and not isinstance(g.get(key), bool)]


def _ratios(v: np.ndarray) -> np.ndarray:
    """Each rate over the one before (1 where the one before is 0: a rate held at 0 neither jumps nor falls)."""
    if len(v) < 2:
        return np.ones(0)
    prev = v[:-1]
    return np.divide(v[1:], prev, out=np.ones(len(prev)), where=prev > 0)


def learning_rate(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    out: list[Finding] = []
    steps, lr = d.steps["step"], d.steps["lr"]
    # (a rate of exactly 0 counts: a schedule that ends early holds it there for the rest of the run)
    ok = np.isfinite(lr) & (lr >= 0)
    if ok.sum() < 5 or not float(lr[ok].max()) > 0:
        return out
    v, s = lr[ok], steps[ok]
    lead = int(np.argmax(v > 0))  # (a schedule may start at 0: its growth is judged from its first positive rate)
    first, peak, n = float(v[lead]), float(v.max()), len(d.steps["step"])
    at_peak = int(s[int(np.argmax(v))])
    jumps = _ratios(v[lead:])
    gradual = not len(jumps) or float(jumps.max()) < 5.0
    # a warmup with no cap: still growing at the end, and the loss stopped improving while it grew
    # (one that stays below the base rate the user set is a warmup longer than the run: too low, below)
    still_growing = at_peak >= int(s[int(0.8 * (len(s) - 1))])
    base = next((b for b in _floats(d, "initial_lr") if b > 0), None)
    still_growing = still_growing and (base is None or peak > 2.0 * base)
    capped = base is not None and peak <= 2.0 * base  # a warmup that stops at the rate the user set is capped, however the run ends
    if peak / first >= t.lr_growth_high and gradual and not capped and (_ends_badly(d, curve) or (still_growing and (_best_early(d) or _poor(curve, t)))):
        out.append(Finding(kinds.OPTIMIZER, kinds.LEARNING_RATE_TOO_HIGH, "error",
                           f"the learning rate grew {peak / first:.3g}x over the run (from {_fmt(first)} to {_fmt(peak)} at step {at_peak}), "
                           "never in one jump, and the loss ends far above its best: a warmup with no cap?", 0.9, at_peak))
    elif peak / first >= t.lr_growth_high and gradual and still_growing and base is not None and peak >= t.lr_over_base_high * base:
        # the schedule took the rate far past the one the user chose and it still rises at the end: nothing caps it
        out.append(Finding(kinds.OPTIMIZER, kinds.LEARNING_RATE_TOO_HIGH, "error",
                           f"the learning rate grew {peak / first:.3g}x over the run, to {_fmt(peak)} at step {at_peak}: "
                           f"{peak / base:.3g}x the rate {_fmt(base)} the optimizer was given, and still rising at the end: a "
                           "warmup with no cap?", 0.75, at_peak))
    floor = t.lr_decay_low * peak * 1.001  # (two cuts by 10x land on 1% of the peak, give or take a rounding)
    low = np.flatnonzero(v < floor)
    if len(low) and (v[low[0]:] < floor).all():
        k = int(s[low[0]])
        share = (k - int(steps[0])) / max(1, n)  # (of the run's phase, when it has several)
        loss = d.steps["loss"]
        idx = int(np.searchsorted(steps, k))
        before, after = loss[: idx + 1], loss[idx:]
        before, after = before[np.isfinite(before)], after[np.isfinite(after)]
        if share <= 0.5 and len(after) >= 5 and len(before):
            at_k = float(np.median(before[-3:]))
            gain = 1.0 - float(np.median(after[-max(3, len(after) // 5):])) / at_k if at_k > 0 else 0.0
            if gain < 0.1 and (_poor(curve, t) or float(v[-1]) < t.lr_decay_dead * peak):
                out.append(Finding(kinds.OPTIMIZER, kinds.LEARNING_RATE_TOO_LOW, "error",
                                   f"the learning rate fell from {_fmt(peak)} to below {_fmt(t.lr_decay_low * peak)} by step {k} "
                                   f"({share:.0%} of the run: a scheduler stepped every batch, or told a length shorter than the run?), and the "
                                   f"loss stopped falling there "
                                   f"({at_k:.4g} then)", 0.9, k))
    early = _decayed_early(d, v, s, t, curve)
    if early is not None and not any(f.kind == kinds.LEARNING_RATE_TOO_LOW for f in out):
        out.append(early)
    # (a rate the run never brought near the one chosen for it: wrong unless the loss got where it should anyway; a
    # one-cycle schedule's chosen rate is its max_lr, which it starts a 25th below)
    top = next((b for b in _floats(d, "max_lr") if b > 0), None)
    chosen, why = (top, "a one-cycle schedule stepped once an epoch, not once a step?") if top is not None and n >= 20 else (
        base, "a warmup longer than the run?")
    if chosen is not None and peak < t.lr_base_low * chosen and (_poor(curve, t) or not progress(curve) >= 0.9):
        out.append(Finding(kinds.OPTIMIZER, kinds.LEARNING_RATE_TOO_LOW, "error",
                           f"the learning rate never came near its {'max_lr' if chosen is top else 'base'} {_fmt(chosen)}: at most "
                           f"{_fmt(peak)} ({peak / chosen:.2g} of it) in {n} steps ({why}), and the loss hardly falls", 0.9, int(s[0])))
    return out


def _decayed_early(d: RunData, v: np.ndarray, s: np.ndarray, t: Thresholds, curve: LossCurve) -> Finding | None:
    """A schedule that has brought the rate down to a small part of its peak early in the run (its horizon an
    epoch, a scheduler stepped per batch or micro-batch) while the loss has still much to learn: the rest of the
    run learns at a fraction of the speed it was set for. Only a gradual decay: a plateau scheduler's sudden cut
    after the loss stopped falling is what it is for."""
    n = len(d.steps["step"])
    peak = float(v.max())
    below = v < t.lr_early_low * peak
    if n < 20 or not below[-1]:
        return None
    k = int(np.flatnonzero(~below)[-1]) + 1 if (~below).any() else 0
    jumps = _ratios(v)
    gradual = int(np.sum(jumps[:k] < 0.99)) >= 5  # a schedule's many small falls, not a few cuts
    at = float(s[k] - d.steps["step"][0]) if k else 0.0  # steps into the run (its last phase)
    if k == 0 or at > t.lr_early_share * n or not gradual:
        return None
    loss = d.steps["loss"]
    idx = int(np.searchsorted(d.steps["step"], s[k]))
    after = loss[idx:][np.isfinite(loss[idx:])]
    if len(after) < 10:
        return None
    w = max(3, len(after) // 5)
    start, end = float(np.median(after[:w])), float(np.median(after[-w:]))
    if start <= 0 or not curve.head > 0 or end < t.converged_share * curve.head:
        return None  # the loss had nothing left to learn: a fast anneal did no harm
    how = "still falling" if end < 0.9 * start else "no longer falling"
    return Finding(kinds.OPTIMIZER, kinds.LEARNING_RATE_TOO_LOW, "error",
                   f"the learning rate fell from {_fmt(peak)} to below {_fmt(t.lr_early_low * peak)} by step {int(s[k])} "
                   f"({at / n:.0%} of the run: a schedule whose horizon is shorter than the run, or one stepped every "
                   f"batch?) and stayed there, with the loss {how} ({start:.4g} then, {end:.4g} at the end)",
                   0.7, int(s[k]))


def clipping(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    out: list[Finding] = []
    steps = d.steps
    norm, clip = steps.get("grad_norm"), steps.get("clip_norm")
    if norm is not None and clip is not None:
        both = np.isfinite(norm) & np.isfinite(clip) & (norm > 0)
        if both.sum() >= max(3, 0.5 * len(norm)):
            ratio = float(np.median(clip[both] / norm[both]))
            # too strong: ordinary gradients cut to almost nothing (gradients that exploded are the other fault)
            # or, for an optimizer whose step is the gradient's size (SGD), every step cut several times while the loss
            # makes poor progress: clipping sets the step, not the learning rate (an adaptive one divides it away)
            slow = d.optimizer_type not in ADAPTIVE and (ratio < t.clip_ratio_slow and _poor(curve, t) or ratio < 0.4 * t.clip_ratio_slow)
            if (ratio < t.clip_ratio_low or slow) and float(np.median(norm[both])) < t.global_grad_norm:
                out.append(Finding(kinds.OPTIMIZER, kinds.GRADIENT_CLIPPING_TOO_STRONG, "error",
                                   f"clip_grad_norm_ to {_fmt(float(np.median(clip[both])))} rescales every step's gradient "
                                   f"(norm {_fmt(float(np.median(norm[both])))} before clipping) to {ratio:.2g} of it: "
                                   f"each step is {1 / ratio:.3g}x smaller than the learning rate intends", min(1.0, 0.6 + 0.1 * math.log10(1 / ratio)),
                                   int(steps["step"][np.flatnonzero(both)[0]])))
    value = steps.get("clip_value")
    if value is not None and np.isfinite(value).any():
        gsteps, gmax = d.metric("grad_max")
        if gmax.size:
            top = gmax[:, 0].astype(np.float64)  # the root: every gradient
            idx = {int(s): k for k, s in enumerate(steps["step"])}
            pairs = [(float(value[idx[int(s)]]), top[r]) for r, s in enumerate(gsteps)
                     if int(s) in idx and np.isfinite(value[idx[int(s)]]) and np.isfinite(top[r]) and top[r] > 0]
            if pairs:
                ratio = float(np.median([c / m for c, m in pairs]))
                if ratio < t.clip_ratio_low and float(np.median([m for _, m in pairs])) < t.layer_grad_norm:
                    out.append(Finding(kinds.OPTIMIZER, kinds.GRADIENT_CLIPPING_TOO_STRONG, "error",
                                       f"clip_grad_value_ to {_fmt(pairs[0][0])} cuts every gradient element down from up to "
                                       f"{_fmt(float(np.median([m for _, m in pairs])))}: {ratio:.2g} of the largest, so the steps "
                                       "keep only the gradients' signs, scaled to almost nothing",
                                       min(1.0, 0.6 + 0.1 * math.log10(1 / ratio)), int(gsteps[0])))
    return out


def _layer_rms(d: RunData, late: bool = False) -> float | None:
    """The median over layers and steps of each layer's gradient RMS (its L2 norm over the root of its size);
    ``late``: over the second half of the run only."""
    _, g = d.metric("grad_norm")
    layers = d.own_layers()
    if not g.size or not layers:
        return None
    if late:
        g = g[len(g) // 2:]
    size = np.array([max(1, d.modules[i].own_params) for i in layers], dtype=np.float64)
    rms = g[:, layers].astype(np.float64) / np.sqrt(size)
    rms = rms[np.isfinite(rms) & (rms > 0)]
    return float(np.median(rms)) if len(rms) else None


def adam_eps(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    if d.optimizer_type not in ADAM_LIKE:
        return []
    eps = _floats(d, "eps")
    rms = _layer_rms(d)
    if not eps or rms is None or rms <= 0:
        return []
    e = max(eps)
    if e < 1e-4:
        return []
    if e < t.eps_over_grad_rms * rms:
        # nearer the gradients' size, eps still damps every step by rms / (rms + eps): a fault when the gradients of the
        # run's second half are that small and the loss is still falling at its end (the damped steps are what holds it)
        late = _layer_rms(d, late=True)
        loss = d.steps["loss"]
        fin = loss[np.isfinite(loss)]
        q = len(fin) // 4
        if late is None or late <= 0 or e < t.eps_over_grad_rms_late * late or q < 5:
            return []
        third, last = float(np.median(fin[2 * q:3 * q])), float(np.median(fin[3 * q:]))
        if not (third > 0 and last < t.eps_still_falling * third and last > t.converged_share * curve.head):
            return []
        damp = late / (late + e)
        return [Finding(kinds.OPTIMIZER, kinds.OPTIMIZER_EPS_TOO_HIGH, "error",
                        f"{d.optimizer_type}'s eps={_fmt(e)} is {e / late:.3g}x the gradients' RMS in the second half of the run "
                        f"({_fmt(late)}): each step is about {damp:.2g} of the normalised step {d.optimizer_type} takes, and the loss "
                        f"is still falling at the end ({third:.4g} to {last:.4g} in the last quarter)",
                        min(0.9, 0.6 + 0.2 * math.log10(e / late)), int(d.steps["step"][0]))]
    # far past the threshold the updates are a small fraction of Adam's step, however the loss goes
    severity = "error" if _poor(curve, t) or e >= 3 * t.eps_over_grad_rms * rms else "warning"
    return [Finding(kinds.OPTIMIZER, kinds.OPTIMIZER_EPS_TOO_HIGH, severity,
                    f"{d.optimizer_type}'s eps={_fmt(e)} is {e / rms:.3g}x the gradients' RMS ({_fmt(rms)}): each update is about "
                    f"lr * g / eps, {e / rms:.3g}x smaller than the normalised step {d.optimizer_type} takes", min(1.0, 0.6 + 0.1 * math.log10(e / rms)),
                    int(d.steps["step"][0]))]


def weight_decay(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    out: list[Finding] = []
    layers = d.own_layers()
    if not layers:
        return out
    # a penalty on the weights written into the loss: every layer's gradient points along its weights
    steps, cos = d.metric("grad_weight_cos")
    if cos.size:
        med = np.array([np.nanmedian(cos[:, i]) if np.isfinite(cos[:, i]).any() else np.nan for i in layers])
        known = np.isfinite(med)
        if known.sum() >= 2:
            share = float(np.mean(med[known] > t.penalty_cos_high))
            if share >= 0.6:  # (whatever the loss does: the penalty falls as the weights shrink, the data's part does not)
                out.append(Finding(kinds.LOSS, kinds.WEIGHT_DECAY_TOO_HIGH, "error",
                                   f"in {share:.0%} of the layers the gradient points along the weights (median cos "
                                   f"{float(np.nanmedian(med)):.3f}): a weight penalty in the loss is nearly all of the gradient, "
                                   "and the data's part is lost", min(1.0, 0.5 + share / 2), int(steps[0])))
    # decay by the optimizer: the weights shrink while the loss does not fall
    wd = max(_floats(d, "weight_decay"), default=0.0)
    wsteps, w = d.metric("weight_norm")
    collapsed = False
    ratio = _decay_over_grad(d, wd, wsteps, w, layers) if wd > 0 and w.size and d.optimizer_type in COUPLED_DECAY else None
    if ratio is not None and len(wsteps) >= 2:
        # a coupled decay as large as the gradient, and the weights halved in most layers: the decay took them, whatever
        # the loss's progress says (a negative log-likelihood has no zero to measure progress against)
        a, b = w[0, layers].astype(np.float64), w[-1, layers].astype(np.float64)
        fin = np.isfinite(a) & np.isfinite(b) & (a > 0)
        # (only at a decay above what L2 is set to in such optimizers, 1e-4 to 1e-2: 0.1 is AdamW's decoupled value put
        # into Adam; under Adam a decay a tenth of the gradient already turns a share of each normalised step to 0)
        collapsed = (bool(fin.sum()) and float(np.mean(b[fin] / a[fin] < t.weight_shrink_low)) >= 0.5
                     and wd >= t.coupled_decay_high
                     and (ratio >= t.coupled_decay_over_grad or (d.optimizer_type in ADAPTIVE and ratio >= 0.1)))
    # a coupled decay a small part of the gradient at the start, under a loss flat from its first steps: the gradient
    # carried no signal before the decay could shrink anything, and Adam's normalised steps of the decay alone shrink
    # weights whose gradient is ~0 at the rate's full speed, however small the decay (the shrinking is the symptom)
    first = _decay_over_grad(d, wd, wsteps[:1], w[:1], layers) if ratio is not None and len(wsteps) else None
    symptom = first is not None and first < 0.1 and curve.not_decreasing and not collapsed
    if wd > 0 and w.size and len(wsteps) >= 2 and (_poor(curve, t) or collapsed) and not symptom:
        start, end = w[0, layers].astype(np.float64), w[-1, layers].astype(np.float64)
        ok = np.isfinite(start) & np.isfinite(end) & (start > 0)
        if ok.sum():
            shrink = end[ok] / start[ok]
            share = float(np.mean(shrink < t.weight_shrink_low))
            # the decay must be able to take that much: a coupled decay a tenth of the gradient's size or less does not
            # steer the steps, and a decoupled one takes lr * wd a step, exp(-lr * wd * steps) over the run; weights
            # that shrink faster than that were shrunk by their gradient
            lr = d.steps["lr"]
            pull = (float(np.nanmedian(lr)) if np.isfinite(lr).any() else 0.0) * wd * d.n_steps
            able = collapsed or (ratio >= 0.1 if ratio is not None else
                                 pull >= 0.5 * math.log(1.0 / max(float(np.median(shrink)), 1e-12)))
            if share >= 0.5 and able:
                how = "makes poor progress" if _poor(curve, t) else f"is pulled by a decay {ratio:.3g}x the gradient's size"
                out.append(Finding(kinds.OPTIMIZER, kinds.WEIGHT_DECAY_TOO_HIGH, "error",
                                   f"weight_decay={_fmt(wd)} shrinks {share:.0%} of the layers' weights to a median {float(np.median(shrink)):.2g} "
                                   f"of their start by step {int(wsteps[-1])} while the loss {how}: the decay outweighs the "
                                   "gradient", min(1.0, 0.5 + share / 2), int(wsteps[-1])))
            # the decay alone shrinks the weights by (1 - lr * wd) a step: when that compounds to a large share over
            # the run (a half-life shorter than the run) and the weights do shrink, the decay, not the data, sets them
            lr = d.steps["lr"]
            rate = float(np.nanmedian(lr)) if np.isfinite(lr).any() else 0.0
            pull = rate * wd * d.n_steps
            shrinking = float(np.mean(shrink < t.weight_shrink_decay))
            if not out and pull >= math.log(2) and shrinking >= 0.5:
                out.append(Finding(kinds.OPTIMIZER, kinds.WEIGHT_DECAY_TOO_HIGH, "error",
                                   f"weight_decay={_fmt(wd)} at lr {_fmt(rate)} takes {rate * wd:.2g} of the weights every step "
                                   f"(a half-life of {math.log(2) / (rate * wd):.0f} steps in a run of {d.n_steps}); {shrinking:.0%} of the "
                                   f"layers' weights shrank to a median {float(np.median(shrink)):.2g} of their start while the loss "
                                   "made poor progress: the decay outweighs the gradient", min(1.0, 0.5 + shrinking / 2), int(wsteps[-1])))
        # coupled decay (added to the gradient): compare its size with the gradient's
        # (plain SGD moves the weights by lr * wd * W a step for the decay: when that sums to a few percent over the
        # run, the decay cannot have moved them, and a gradient it outweighs is one that vanished by itself)
        lr = d.steps["lr"]
        pull = (float(np.nanmedian(lr)) if np.isfinite(lr).any() else 0.0) * wd * d.n_steps  # (the decay's share over the run)
        negligible = d.optimizer_type not in ADAPTIVE and pull < 0.05
        if ratio is not None and not out and not negligible:
            # (an adaptive optimizer normalises gradient and decay together: a decay as large as the gradient turns
            # most of the step towards zero, however the rate is set)
            if ratio >= t.coupled_decay_over_grad:
                out.append(Finding(kinds.OPTIMIZER, kinds.WEIGHT_DECAY_TOO_HIGH, "error",
                                   f"weight_decay={_fmt(wd)} adds {ratio:.3g}x the gradient's size to every step "
                                   f"({d.optimizer_type} adds wd * W to the gradient) and the loss makes "
                                   f"{'poor' if _poor(curve, t) else 'less'} progress ({curve.head:.4g} -> {curve.tail:.4g}): the decay, "
                                   "not the data, steers the step",
                                   float(np.clip(0.6 + 0.1 * np.log10(ratio / t.coupled_decay_over_grad + 1e-12) + 0.2, 0.6, 0.95)),
                                   int(wsteps[0])))
    return out


def _decay_over_grad(d: RunData, wd: float, wsteps: np.ndarray, w: np.ndarray, layers: list[int]) -> float | None:
    """The median over layers and measured steps of wd * |W| / |g|: a coupled decay's size beside the gradient's."""
    gsteps, g = d.metric("grad_norm")
    rows = {int(s): k for k, s in enumerate(gsteps)}
    pairs = [(r, rows[int(s)]) for r, s in enumerate(wsteps) if int(s) in rows]
    if not pairs:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero gradient: the ratio is inf, then dropped
        ratio = wd * w[[a for a, _ in pairs]][:, layers].astype(np.float64) / g[[b for _, b in pairs]][:, layers].astype(np.float64)
    r = ratio[np.isfinite(ratio)]
    return float(np.median(r)) if len(r) else None


def detect(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    return learning_rate(d, t, curve) + clipping(d, t, curve) + adam_eps(d, t, curve) + weight_decay(d, t, curve)
