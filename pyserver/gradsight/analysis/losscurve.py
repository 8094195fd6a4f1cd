"""The loss curve: spikes, a loss that does not decrease, oscillation, divergence, learning-rate jumps."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..thresholds import Thresholds
from .data import RunData
from .findings import Finding


@dataclass
class LossCurve:
    spike_step: int | None = None
    not_decreasing: bool = False
    oscillating: bool = False
    diverging: bool = False
    lr_jump_step: int | None = None
    spike_recovered: bool = False  # a spike the loss came back down from
    rose: bool = False  # the loss ends well above its first step's (it blew up at once, before the first tenth ends)
    near_chance: str | None = None  # a classifier's cross-entropy that ends near ln(C): what it says, when it does
    head: float = float("nan")  # median of the first tenth
    tail: float = float("nan")  # median of the last fifth

    @property
    def progress(self) -> float:
        """The share of its start the loss fell by (nan when that is not defined)."""
        if not (math.isfinite(self.head) and math.isfinite(self.tail)) or self.head <= 0:
            return float("nan")
        return 1.0 - self.tail / self.head


def analyse(data: RunData, t: Thresholds) -> tuple[LossCurve, list[Finding]]:
    steps = data.steps["step"]
    loss = data.steps["loss"]
    out: list[Finding] = []
    curve = LossCurve()
    spikes = [e for e in data.events if e.kind == "trigger" and e.name == "loss_spike"]
    if spikes and spikes[0].step is not None:
        curve.spike_step = int(spikes[0].step)
        out.append(Finding("loss", "loss_spike", "error", spikes[0].message or "loss spike", 0.8, curve.spike_step))
    else:
        first = loss[np.isfinite(loss)][: t.loss_spike_window]
        floor = t.loss_spike_floor * float(np.median(np.abs(first))) if len(first) else 0.0
        for k in range(t.loss_spike_window, len(loss)):
            past = loss[k - t.loss_spike_window : k]
            past = past[np.isfinite(past)]
            if (len(past) >= 3 and np.isfinite(loss[k]) and past.mean() > 0 and loss[k] > t.loss_spike_factor * past.mean()
                    and loss[k] > floor):
                curve.spike_step = int(steps[k])
                out.append(Finding("loss", "loss_spike", "error",
                                   f"loss {loss[k]:.4g} is {loss[k] / past.mean():.1f}x its {len(past)}-step mean", 0.7, curve.spike_step))
                break
    fin = loss[np.isfinite(loss)]
    n = len(fin)
    if n >= 20:
        head = float(np.median(fin[: max(3, n // 10)]))
        tail = float(np.median(fin[-max(3, n // 5):]))
        curve.head, curve.tail = head, tail
        curve.rose = bool(fin[0] > 0 and tail > 1.5 * fin[0])
        lowest = float(np.min(_smooth(fin)))
        if head > 0 and tail > 0.9 * head:
            curve.not_decreasing = True
            out.append(Finding("loss", "loss_not_decreasing", "error" if tail >= head else "warning",
                               f"loss went from {head:.4g} (first tenth) to {tail:.4g} (last fifth): less than 10% lower", 0.6))
        if not curve.not_decreasing:
            curve.near_chance = _near_chance(data, t)
        half = fin[n // 2:]
        d = np.diff(half)
        if len(d) >= 10 and half.mean() > 0:
            flips = float(np.mean(np.sign(d[1:]) != np.sign(d[:-1])))
            swing = float(np.mean(np.abs(d)) / half.mean())
            if flips > 0.6 and swing > 0.3 and tail > 0.5 * head:  # noise around a falling loss is no oscillation
                curve.oscillating = True
                out.append(Finding("loss", "oscillating_loss", "warning",
                                   f"in the second half the loss changes direction on {flips:.0%} of steps, by {swing:.0%} of its mean", 0.6))
        if tail > 2 * lowest and tail > head:
            curve.diverging = True
    if curve.spike_step is not None and math.isfinite(curve.tail):
        # a spike the run recovers from (a warmup's peak, one bad batch) ends well below where the loss was before it
        before = loss[(steps < curve.spike_step) & (steps >= curve.spike_step - t.loss_spike_window)]
        before = before[np.isfinite(before)]
        after = loss[(steps > curve.spike_step) & (steps <= curve.spike_step + t.loss_spike_window)]
        level = float(np.median(before)) if len(before) else float("nan")
        # or one bad batch on a plateau: the next steps are back at the level before it, and the run stays there
        back = len(after) >= 3 and np.isfinite(after).all() and float(np.median(after)) <= 1.5 * level and curve.tail <= 1.5 * level
        at = loss[steps == curve.spike_step]
        # a spike in the run's last steps cannot show whether the run recovers: below where the run began, one bad
        # batch is the likelier reading than a run going wrong
        late = bool(len(after) < 3 and len(at) and np.isfinite(at[0]) and math.isfinite(curve.head) and float(at[0]) < curve.head
                and not curve.diverging)
        if len(before) and (curve.tail < 0.5 * level or back or late) and np.isfinite(loss[-max(1, len(loss) // 10):]).all():
            curve.spike_recovered = True
            note = "; it came in the run's last steps, below the loss the run began with" if late and not back else "; the run recovered from it"
            for k, f in enumerate(out):
                if f.kind == "loss_spike":
                    out[k] = Finding(f.module, f.kind, "warning", f.evidence + note, f.strength * 0.5, f.step)
            curve.spike_step = None
    lr = data.steps["lr"]
    ok = np.isfinite(lr) & (lr > 0)
    for k in range(1, len(lr)):
        if ok[k] and ok[k - 1] and lr[k] > 5 * lr[k - 1]:
            curve.lr_jump_step = int(steps[k])
            out.append(Finding("optimizer", "learning_rate_too_high", "warning",
                               f"the learning rate jumped from {lr[k - 1]:.3g} to {lr[k]:.3g} at step {int(steps[k])}", 0.6, int(steps[k])))
            break
    return curve, out


def _smooth(x: np.ndarray, k: int = 5) -> np.ndarray:
    if len(x) < k:
        return x
    return np.convolve(x, np.ones(k) / k, mode="valid")


def _near_chance(data: RunData, t: Thresholds) -> str | None:
    """A classifier whose cross-entropy, late in the run, is still most of ln(C), what predicting every class
    alike gives: it learned next to nothing, however much the loss fell from a worse start (labels that carry no
    signal let a net memorise a little of them). Read off the loss's own measured calls (the step's loss may
    hold other terms)."""
    calls = [o for o in data.observed("loss") if o.data.get("loss") == "cross_entropy" and o.data.get("reduction") == "mean"]
    if not calls or data.n_steps < 50:
        return None
    last = calls[-1]
    shape, value = last.data.get("input_shape") or [], last.data.get("value")
    first = int(data.steps["step"][0])
    if len(shape) != 2 or shape[1] < 2 or not isinstance(value, (int, float)) or last.step - first < 0.4 * data.n_steps:
        return None
    ln_c = math.log(shape[1])
    if value < t.loss_near_chance * ln_c:
        return None
    return (f"the cross-entropy at step {last.step} is {value:.4g}, {value / ln_c:.0%} of ln({shape[1]}) = {ln_c:.3g} (every class "
            "alike): the model has learned next to nothing")
