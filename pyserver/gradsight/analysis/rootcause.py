"""Root cause: follow the anomaly back to where it started.

Causes are weighed in causal order, the most direct evidence first:

0. the loop wires gradients wrong (never zeroed, parameters no optimizer steps,
   probabilities fed to a loss that applies softmax itself);
1. non-finite values: where they first appear (input, a module's output in
   forward order, the loss, a gradient);
2. the learning rate: a jump just before the anomaly, or update ratios high in
   most layers while the loss spikes, oscillates or diverges;
3. the forward path: an unnormalised input, weights badly scaled from the start,
   then the first module (in time, then forward order) whose output left its range;
4. the backward path: the layer whose gradient norm explodes first;
5. gradients that vanish (through a chain of sigmoid/tanh activations: the activations are named) or units
   that die, nearest the input first (units that died after the loss had already stopped falling follow
   from what stopped it, and are passed over);
6. a loss that does not decrease: frozen layers, tiny steps, an oscillating
   optimizer, else the data.

Confidence = strength of the chosen finding (0.5 at its threshold, 1.0 far past)
x how direct its tier's evidence is (1.0 for tiers 0-1 down to 0.6 for tier 6)
x (1 - 0.4 x the strength of the strongest competing finding of the same tier
that the chosen one does not explain). A weak or ambiguous signal gives a low value.
That score is then calibrated (calibration.py): the confidence given is how often answers of the same tier and
score were right on labelled runs.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..thresholds import Thresholds
from .calibration import calibrated
from .data import EMBEDDINGS, SATURATING, RunData
from .findings import Finding
from .losscurve import LossCurve

ADAM_FAMILY = {"Adam", "AdamW", "NAdam", "RAdam", "Adamax"}
# optimizers whose step is about the rate per weight whatever the gradient's size (Adagrad's shrinks over the run)
ADAPTIVE_STEPS = ADAM_FAMILY | {"RMSprop"}

TIER_WEIGHT = {0: 1.0, 1: 1.0, 2: 0.9, 3: 0.85, 4: 0.8, 5: 0.75, 6: 0.6}


@dataclass
class RootCause:
    module: str
    kind: str
    confidence: float
    path: list[str]
    evidence: str
    step: int | None
    tier: int = 0  # the rank of the rule that chose it (see find): calibration reads it
    score: float | None = None  # the confidence before calibration


def find(data: RunData, findings: list[Finding], curve: LossCurve, t: Thresholds) -> RootCause | None:
    errors = [f for f in findings if f.severity == "error"]
    # (a loss spike the run recovered from is a warmup's peak or one bad batch: nothing to trace back)
    triggered = [e for e in data.events if e.kind == "trigger" and not (curve.spike_recovered and e.name == "loss_spike")]
    anomaly_step = min((e.step for e in triggered if e.step is not None), default=None)
    stuck = curve.not_decreasing or curve.near_chance or any(f.kind == "loss_spike" for f in findings)
    untrained = [] if stuck else _frozen_untrained(data, findings, curve, t)
    small = [] if stuck else _small_steps(data, curve, t)
    head_frozen = _frozen_output(data, findings)
    if not errors and not triggered and not curve.not_decreasing and not curve.near_chance and not untrained and not small \
            and not head_frozen \
            and _replaced(data, t)[0] < 0.5:
        return None
    rank = data.forward_rank()
    index = data.index

    def order(f: Finding) -> tuple[float, float]:
        step = f.step if f.step is not None else 10**9
        return (step, rank.get(index.get(f.module, -1), -1) if f.module in index else -1)

    def of(kind: str, severity: str | None = "error") -> list[Finding]:
        return sorted([f for f in findings if f.kind == kind and (severity is None or f.severity == severity)], key=order)

    tiers: list[tuple[int, list[Finding]]] = []
    # the script's own code taking the labels apart from their inputs (``scriptcheck``): what the loss curve shows
    # of labels with no signal looks healthy everywhere else
    unpaired = [f for f in of("loss_not_decreasing") if f.module == "input" and f.mechanism]
    tiers.append((0, unpaired + of("grads_not_zeroed") + of("no_gradient") + of("not_updated") + of("double_softmax") + of("double_sigmoid")
                  + of("loss_target_mismatch") + of("frozen") + of("gradient_clipping_too_strong") + of("optimizer_eps_too_high")
                  + of("weight_decay_too_high")))
    nonfinite = of("nan_inf")
    direct_nonfinite = [f for f in nonfinite if f.direct]
    # a loss that overflows while every module's output is finite, on an input far out of range: the input's scale
    # made the outputs too large for the loss (exp of a huge log-rate), so the input comes first
    overflowed = [f for f in of("activation_out_of_range") if f.module == "input"] if direct_nonfinite and all(
        f.module == "loss" for f in direct_nonfinite) else []
    tiers.append((1, overflowed + _step_blew_up(data, direct_nonfinite, t) + direct_nonfinite))
    tiers.append((2, of("loss_scale_too_high") + [f for f in of("learning_rate_too_high") + of("learning_rate_too_low")
                                                   if "learning rate grew" in f.evidence or "fell from" in f.evidence or "never came near" in f.evidence]
                  + _learning_rate(data, findings, curve, t, anomaly_step) + _no_rate(data, curve)))
    forward = (of("attention_collapse") + of("dropout_too_high") + of("activation_out_of_range") + of("poor_initialization")
               + of("activation_out_of_range", "warning"))
    input_first = [f for f in forward if f.module == "input"]
    init = [f for f in forward if f.kind == "poor_initialization"]
    inside = sorted([f for f in forward if f.module != "input" and f.kind != "poor_initialization"], key=order)
    tiers.append((3, input_first + _from_start(inside, init, data) + inside))
    tiers.append((4, of("exploding_gradient") + [f for f in nonfinite if not f.direct]))
    # zero gradients (indirect dead units) start where the flow stops: the layer nearest the loss among them
    direct = sorted([f for f in of("vanishing_gradient") + of("dead_units") if f.direct], key=order)
    indirect = sorted([f for f in of("dead_units") if not f.direct], key=lambda f: (f.step if f.step is not None else 10**9,
                                                                                      -rank.get(index.get(f.module, -1), -1)))
    dying = direct + indirect
    if curve.not_decreasing:
        # units that were alive when the run began and died while the loss never fell follow from what kept it
        # from falling (labels with no signal, say): they are not its cause
        first = _first_sampled(data)
        dying = [f for f in dying if f.kind != "dead_units" or f.step is None or first is None or f.step <= first + 1]
    tiers.append((5, [f for f in dying if f.mechanism] + _through_squashing(data, dying) + dying + [f for f in of("saturation", None) if f.severity != "info"]
                  + of("attention_entropy_collapse")))
    if stuck:
        tiers.append((6, _stagnation(data, findings, curve, t)))
    elif untrained:
        tiers.append((6, untrained))
    if small:
        tiers.append((6, small))
    if head_frozen:
        tiers.append((6, head_frozen))
    for tier, cands in tiers:
        if not cands:
            continue
        top = cands[0]
        rivals = [f for f in cands[1:] if f.key != top.key and not _explains(top, f, rank, index)]
        rival = max((f.strength for f in rivals), default=0.0)
        conf = top.strength * TIER_WEIGHT[tier] * (1 - 0.4 * rival)
        return RootCause(top.module, top.kind, round(calibrated(tier, float(conf)), 3), _path(data, top, findings), top.evidence,
                         top.step, tier, round(float(conf), 3))
    return None


def _replaced(data: RunData, t: Thresholds) -> tuple[float, float]:
    """The share of layers that one of the run's first three sampled steps moved by more than their own size, and
    the largest such move (embeddings apart: a table started tiny on purpose, a factorisation's, moves by more than
    its size at first)."""
    _, ur = data.metric("update_ratio")
    layers = [i for i in data.own_layers() if data.modules[i].type not in EMBEDDINGS]
    if not ur.size or not layers:
        return 0.0, 0.0
    opening = np.nan_to_num(ur[: min(3, len(ur))][:, layers].astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0).max(axis=0)
    return float(np.mean(opening > 10 * t.update_ratio_high)), float(opening.max())


def _step_blew_up(data: RunData, nonfinite: list[Finding], t: Thresholds) -> list[Finding]:
    """Values that turn non-finite just after an optimizer step that moved most layers' weights by more than
    their own size: the step (its learning rate) made them, not the module where they first show."""
    if not nonfinite or nonfinite[0].step is None or nonfinite[0].module == "input":
        return []
    at = nonfinite[0].step
    steps, ur = data.metric("update_ratio")
    layers = data.own_layers()
    rows = np.flatnonzero((steps < at) & (steps >= at - 2))
    if not len(rows) or not layers:
        return []
    last = ur[rows[-1]][layers].astype(np.float64)
    last = last[np.isfinite(last)]
    big = t.update_ratio_high * 10  # mean|dW| over mean|W| above 1: the step replaced the weights
    if not len(last) or float(np.mean(last > big)) < 0.5:
        return []
    lr = data.steps["lr"]
    rate = float(np.nanmax(lr)) if np.isfinite(lr).any() else float("nan")
    return [Finding("optimizer", "learning_rate_too_high", "error",
                    f"the optimizer step before step {at} moved {float(np.mean(last > big)):.0%} of the layers by a median "
                    f"{float(np.median(last)):.3g}x their own size (learning rate {rate:.3g}); at step {at} the values turned "
                    f"non-finite (first in {nonfinite[0].module!r})", 0.9, int(steps[rows[-1]]))]


def _through_squashing(data: RunData, dying: list[Finding]) -> list[Finding]:
    """Gradients that vanish at a layer followed by a chain of sigmoid/tanh activations: each passes back at most
    1/4 (sigmoid) of the gradient, so the activations, not the layer, are where it is lost."""
    if not dying or dying[0].kind != "vanishing_gradient" or dying[0].module not in data.index:
        return []
    rank = data.forward_rank()
    at = rank[data.index[dying[0].module]]
    after = sorted([m for m in data.modules if m.type in SATURATING and m.forward_order is not None and rank[m.id] > at],
                   key=lambda m: rank[m.id])
    if len(after) < 2:
        return []
    top = dying[0]
    return [Finding(after[0].name, "saturation", "error",
                    f"{top.evidence}; between it and the loss the gradient passes {len(after)} {after[0].type} activations, each "
                    f"passing back a fraction of it (at most 1/4 for a sigmoid): they shrink it on its way back", top.strength, top.step)]


def _first_sampled(data: RunData) -> int | None:
    steps, _ = data.metric("dead_frac")
    return int(steps[0]) if len(steps) else None


def _explains(cause: Finding, other: Finding, rank: dict[int, int], index: dict[str, int]) -> bool:
    """A finding later in time, or downstream in the forward pass at the same time, follows from the cause; so do
    steps too large for their rate when the loss is summed (the sum multiplies every step)."""
    if cause.mechanism and other.kind == cause.kind:  # (the gradient shrinks upstream of what shrinks it, too)
        return True
    if cause.kind == "loss_scale_too_high" and other.kind in ("learning_rate_too_high", "update_ratio_too_high", "exploding_gradient"):
        return True
    if cause.step is not None and other.step is not None and other.step > cause.step:
        return True
    if cause.module in index and other.module in index:
        return rank[index[other.module]] > rank[index[cause.module]] and (other.step is None or cause.step is None or other.step >= cause.step)
    return False


def _from_start(inside: list[Finding], init: list[Finding], data: RunData) -> list[Finding]:
    """Badly scaled weights matter when activations are out of range from the first recorded step:
    then it is initialization, not something training did."""
    steps, _ = data.metric("act_max")
    if not init:
        return []
    if not len(steps):
        return init[:1]  # no activation statistics: the weights' scale is the evidence
    first = int(steps[0])
    at_start = not inside or (inside[0].step is not None and inside[0].step <= first + 1)
    # a first loss far above what the output layer implies is the initial scale seen at the start itself
    return init[:1] if at_start else [f for f in init if f.mechanism and f.step is not None and f.step <= first + 1][:1]


def _learning_rate(data: RunData, findings: list[Finding], curve: LossCurve, t: Thresholds, anomaly: int | None) -> list[Finding]:
    out: list[Finding] = []
    trouble = curve.spike_step is not None or curve.diverging or curve.oscillating or curve.rose or any(
        f.kind in ("nan_inf", "exploding_gradient") and f.severity == "error" for f in findings)
    if curve.lr_jump_step is not None and trouble:
        first_trouble = min([s for s in (curve.spike_step, anomaly) if s is not None], default=None)
        if first_trouble is None or curve.lr_jump_step <= first_trouble:
            jump = next(f for f in findings if f.kind == "learning_rate_too_high" and f.module == "optimizer")
            out.append(Finding("optimizer", "learning_rate_too_high", "error", jump.evidence + ", just before the loss blew up", 0.95, jump.step))
    steps, ur = data.metric("update_ratio")
    layers = data.own_layers()
    first = int(data.steps["step"][0]) if data.n_steps else 0
    # large updates from the start follow from weights or inputs badly scaled from the start: those explain them
    scaled_wrong = any(f.kind == "poor_initialization" and f.severity == "error" and (f.step or 0) <= first + 1 for f in findings) or any(
        f.module == "input" and f.kind == "activation_out_of_range" for f in findings)
    # a rate so high that the net cannot learn need not blow up: the loss stays where it began, or the weights grow
    # until layers' outputs leave their range (the symptom the forward path would name): with updates of more than a
    # tenth of the weights in most layers from the start, both are the rate's
    # (a layer whose output a normalisation takes next is scale-invariant: under SGD its weights grow with a large
    # rate, which only slows its own steps, and the range of its output is the norm's to remove)
    renormed = data.feeds_a_norm()
    # an adaptive optimizer moves each weight by about its rate per step: at a typical rate (<= 1e-2), updates large
    # against the weights say the weights are small, not that the rate is high
    lr = data.steps["lr"]
    # (only for a loss that is merely stuck: a run that spikes or blows up is judged by the rule as before)
    adaptive_typical = (not trouble and data.optimizer_type in ADAPTIVE_STEPS and bool(np.isfinite(lr).any())
                        and float(np.nanmax(lr)) <= t.adaptive_lr_typical_max)
    stuck = curve.not_decreasing or any(f.kind == "activation_out_of_range" and f.severity == "error" and f.module != "input"
                                        and f.module not in renormed for f in findings)
    if ur.size and layers and not scaled_wrong and not adaptive_typical:
        # "from the start": the sampled steps in the run's first tenth (at least two rows), not a share of the rows,
        # which crowd where triggers fired
        n_early = max(2, int(np.sum(steps <= first + max(5, data.n_steps // 10))))
        early = ur[:n_early][:, layers].astype(np.float64)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a layer with no finite value in the window: NaN, dropped below
            per_layer = np.nanmedian(np.where(np.isfinite(early), early, np.nan), axis=0) if np.isfinite(early).any() else np.array([])
        per_layer = per_layer[np.isfinite(per_layer)]
        # the run's first steps replaced the weights (each moved by more than its own size) in most layers: what follows,
        # saturated or exploding layers whose updates then shrink, is the rate's doing, however small the later steps
        replaced, worst = _replaced(data, t)
        if len(per_layer) and replaced >= 0.5 and not ((trouble or stuck) and np.mean(per_layer > t.update_ratio_high) >= 0.5):
            after = ("does not decrease" if curve.not_decreasing else "spikes" if curve.spike_step is not None
                     else "blows up" if trouble else "")
            # (a loss that falls after them still falls from weights the steps made, not from the initialisation)
            then = f", and the loss {after} after them" if after else ": the run trains from weights its first steps replaced"
            out.append(Finding("optimizer", "learning_rate_too_high", "error",
                               f"the first optimizer steps moved {replaced:.0%} of the layers by more than their own size "
                               f"(update ratio mean|dW|/mean|W| up to {worst:.3g}){then}", 0.8, int(steps[0])))
        if (trouble or stuck) and len(per_layer) and np.mean(per_layer > t.update_ratio_high) >= 0.5:
            med = float(np.median(per_layer))
            strength = min(1.0, 0.5 + 0.25 * np.log10(med / t.update_ratio_high + 1e-12) + 0.25)
            how = ("spikes" if curve.spike_step is not None else "diverges" if curve.diverging
                   else "ends above where it began" if curve.rose else "oscillates" if curve.oscillating
                   else "does not decrease" if curve.not_decreasing else "falls while layers' outputs leave their range")
            out.append(Finding("optimizer", "learning_rate_too_high", "error",
                               f"update ratio mean|dW|/mean|W| is {med:.3g} (> {t.update_ratio_high:g}) in "
                               f"{np.mean(per_layer > t.update_ratio_high):.0%} of layers from the start, and the loss "
                               f"{how}",
                               float(np.clip(strength, 0.5, 1.0)), int(steps[0])))
    # weights change only by the optimizer's steps: a layer whose own weights grew several times over until its
    # output left its range was pushed there by steps too large for it (grads_not_zeroed, a summed loss and a
    # negative decay are named in earlier tiers), however small the update ratio looks once gradients are clipped
    grown = sorted([f for f in findings if f.kind == "activation_out_of_range" and f.severity == "error" and f.module != "input"
                    and f.weight_growth > 3 and (trouble or f.module not in renormed)], key=lambda f: f.step if f.step is not None else 10**9)
    # (a negative weight decay grows weights by itself: the layer it is set for is then where the fault is)
    negative_decay = any(isinstance(g.get("weight_decay"), (int, float)) and g["weight_decay"] < 0
                         for o in data.optimizers for g in o.get("groups") or [] if isinstance(g, dict))
    if grown and (trouble or stuck) and not scaled_wrong and not negative_decay and not out:
        g = grown[0]
        out.append(Finding("optimizer", "learning_rate_too_high", "error",
                           f"the weights of {g.module!r} grew {g.weight_growth:.1f}x under the optimizer's steps until its output "
                           f"left its range (out of range from step {g.step}), and the loss "
                           f"{'spiked' if curve.spike_step is not None else 'diverged' if curve.diverging else 'did not decrease'}",
                           0.7, g.step))
    return out


def _fresh(data: RunData) -> tuple[int, list[str]]:
    """The frozen weight matrices that were never changed in the run and still have the scale of a fresh
    initialisation (one normal init's std shared by them all, or PyTorch's default 1/sqrt(3 fan-in)): their
    number of parameters and names. Pretrained weights, or weights trained and then frozen, have neither."""
    steps, norms = data.metric("param_weight_norm")
    if not len(steps):
        return 0, []
    cands: list[tuple[dict[str, Any], float, float]] = []
    for p in data.params:
        shape = json.loads(p["shape"]) if isinstance(p.get("shape"), str) else []
        if p["trainable"] or len(shape) < 2 or p["id"] >= norms.shape[1] or not p["numel"]:
            continue
        col = norms[:, p["id"]].astype(np.float64)
        if not np.isfinite(col).all() or np.ptp(col) > 1e-6 * max(abs(col[0]), 1e-12):
            continue  # updated at some point of the run (trained, then frozen)
        std = float(col[0]) / math.sqrt(p["numel"])
        cands.append((p, std, std * math.sqrt(3 * math.prod(shape[1:]))))
    if not cands:
        return 0, []
    median = float(np.median([c[1] for c in cands]))
    fresh = [p for p, std, default in cands
             if abs(default - 1) <= 0.1 or (len(cands) >= 2 and median > 0 and abs(std / median - 1) <= 0.1)]
    return sum(p["numel"] for p in fresh), [p["name"] for p in fresh]


def _frozen_untrained(data: RunData, findings: list[Finding], curve: LossCurve, t: Thresholds) -> list[Finding]:
    """A frozen part still at its fresh initialisation (random weights nothing trained, here or before: a model
    built from a config and frozen as if pretrained), holding a good share of the model, while the loss falls
    little: the frozen random features are what it is stuck with. (A random stem frozen on purpose leaves
    the loss falling.)"""
    frozen = [f for f in findings if f.kind == "frozen"]
    total = sum(p["numel"] for p in data.params) or 1
    numel, names = _fresh(data)
    progress = curve.progress
    # (most of the model random and frozen is never meant, however far the loss falls on the random features)
    if not frozen or numel / total < t.frozen_untrained_share or not (
            progress < t.frozen_untrained_progress or numel / total >= t.frozen_untrained_most):
        return []
    held = [f for f in frozen if any(n.startswith(f.module + ".") for n in names)] or frozen
    biggest = max(held, key=lambda f: next((m.n_params for m in data.modules if m.name == f.module), 0))
    return [Finding(biggest.module, "frozen", "error",
                    f"{numel / total:.0%} of the parameters ({len(names)} weight matrices) are frozen at their initialisation: "
                    "never changed and still at a fresh init's scale, so nothing trained them, here or before; the loss "
                    f"fell {'only ' if progress < t.frozen_untrained_progress else ''}{max(0.0, progress):.0%}", 0.75, None)]


def _frozen_output(data: RunData, findings: list[Finding]) -> list[Finding]:
    """The layer that makes the model's output (the last weight layer the forward runs) is frozen while layers
    before it train: a backbone is frozen to keep what it learned, a head never is (it must fit the task), so
    its frozen random weights cap what the trainable layers can reach."""
    if not any(f.kind == "frozen" for f in findings):
        return []
    rank = data.forward_rank()
    owned: dict[int, list[dict[str, object]]] = {}
    for p in data.params:
        if p.get("module_id") is not None and str(p.get("name", "")).endswith("weight"):
            owned.setdefault(int(p["module_id"]), []).append(p)
    ran = [mid for mid in owned if data.modules[mid].forward_order is not None]
    if len(ran) < 2:
        return []
    last = max(ran, key=lambda mid: rank[mid])
    if data.modules[last].type in EMBEDDINGS or any(p.get("trainable") for p in owned[last]):
        return []
    if not any(p.get("trainable") and p.get("in_optimizer") for mid in ran if mid != last for p in owned[mid]):
        return []
    name = data.modules[last].name
    return [Finding(name, "frozen", "error",
                    f"the output layer '{name}' ({data.modules[last].type}) is frozen while the layers before it train: "
                    "its weights never fit the task, and the rest of the model can only work around them", 0.7, None)]


def _stagnation(data: RunData, findings: list[Finding], curve: LossCurve, t: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    frozen = [f for f in findings if f.kind == "frozen"]
    total = sum(p["numel"] for p in data.params) or 1
    frozen_numel = sum(p["numel"] for p in data.params if not p["trainable"])
    if frozen and frozen_numel / total >= 0.3 and curve.not_decreasing:
        biggest = max(frozen, key=lambda f: next((m.n_params for m in data.modules if m.name == f.module), 0))
        out.append(Finding(biggest.module, "frozen", "error",
                           f"{frozen_numel / total:.0%} of the parameters are frozen and the loss does not decrease", 0.8, None))
    steps, ur = data.metric("update_ratio")
    layers = data.own_layers()
    if ur.size and layers and (curve.not_decreasing or curve.near_chance):
        vals = ur[:, layers].astype(np.float64)
        vals = vals[np.isfinite(vals)]
        if len(vals) and np.median(vals) < t.update_ratio_low:
            out.append(Finding("optimizer", "learning_rate_too_low", "error",
                               f"median update ratio {np.median(vals):.3g} < {t.update_ratio_low:g} and the loss "
                               f"{'does not decrease' if curve.not_decreasing else 'ends near chance'}", 0.8))
        elif len(vals) and np.median(vals) < 10 * t.update_ratio_low and _adam_rate_typical(data, t):
            pass  # Adam's steps are ~lr each while the gradients agree: small ones at a typical rate are gradients with no direction
        elif len(vals) and np.median(vals) < t.update_ratio_small and curve.near_chance and not curve.not_decreasing:
            # a classifier that ends near chance with steps a third of a healthy size or less: the steps, not the labels
            out.append(Finding("optimizer", "learning_rate_too_low", "error",
                               f"{curve.near_chance}, with a median update ratio of {np.median(vals):.3g} (healthy steps are near "
                               f"{10 * t.update_ratio_low:g}): the steps are too small to learn", 0.65))
        elif len(vals) and np.median(vals) < t.update_ratio_small and _steady_fall(data):
            # the loss keeps falling to the end, but barely, with steps a third of a healthy size or less: each step helps
            # and is too small (labels with no signal are memorised by steps of healthy size, half of one included; a net
            # that cannot learn stays flat)
            out.append(Finding("optimizer", "learning_rate_too_low", "error",
                               f"the loss falls steadily but slowly ({curve.head:.4g} -> {curve.tail:.4g}, every quarter of the run "
                               f"below the one before) with a median update ratio of {np.median(vals):.3g} "
                               f"(healthy steps are near {10 * t.update_ratio_low:g}): the steps are too small", 0.65))
    lr = data.steps["lr"]
    if curve.not_decreasing and np.isfinite(lr).any() and np.nanmax(lr) < 1e-6:
        out.append(Finding("optimizer", "learning_rate_too_low", "error", f"learning rate {np.nanmax(lr):.3g} and the loss does not decrease", 0.8))
    if curve.oscillating:
        out.append(Finding("optimizer", "oscillating_loss", "warning", "the loss oscillates instead of decreasing", 0.6))
    if curve.not_decreasing and not out:
        out.append(Finding("input", "loss_not_decreasing", "warning",
                           f"the loss does not decrease ({curve.head:.4g} -> {curve.tail:.4g}) while gradients and updates look healthy: "
                           "check the data and labels", 0.5))
    elif curve.near_chance and not out:
        out.append(Finding("input", "loss_not_decreasing", "warning",
                           f"{curve.near_chance}, while gradients and updates look healthy: check that the labels go with their "
                           "inputs", 0.5))
    return out


def _adam_rate_typical(data: RunData, t: Thresholds) -> bool:
    """An Adam-family optimizer whose rate peaked at a typical value: its updates are small only when the gradients
    change direction from step to step (its first moment averages them away), not for want of a rate."""
    lr = data.steps["lr"]
    return (data.optimizer_type in ADAM_FAMILY and bool(np.isfinite(lr).any())
            and float(np.nanmax(lr)) >= t.adam_lr_typical)


def _no_rate(data: RunData, curve: LossCurve) -> list[Finding]:
    """A rate that stays at ~0 the whole run (a warmup's first factor, 0, never stepped on) while the loss does not
    fall: nothing else can move the weights, so no symptom downstream (small gradients, say) comes first."""
    lr = data.steps["lr"]
    if not curve.not_decreasing or not np.isfinite(lr).any() or float(np.nanmax(lr)) >= 1e-6:
        return []
    return [Finding("optimizer", "learning_rate_too_low", "error",
                    f"the learning rate is at most {float(np.nanmax(lr)):.3g} over the whole run and the loss does not decrease: "
                    "the optimizer's steps move nothing", 0.9, None)]


def _small_steps(data: RunData, curve: LossCurve, t: Thresholds) -> list[Finding]:
    """A loss that falls to the end but by less than half, while the steps move the weights by a tenth of a
    healthy step's share or less: each step helps and is too small (a learning rate off by an exponent). Only
    when nothing else explains the run (the last tier): a net held back by another fault takes small steps too."""
    if not (curve.progress < t.slow_progress) or not _steady_fall(data):
        return []
    # and the rate itself is low for its optimizer (below 1e-2 for SGD, 1e-4 for Adam's kind): at a typical rate,
    # small ratios are scale-invariant weights before a norm, not small steps
    lr = data.steps["lr"]
    low = 1e-4 if data.optimizer_type in ADAPTIVE_STEPS else 1e-2
    if not np.isfinite(lr).any() or float(np.nanmax(lr)) >= low:
        return []
    _, ur = data.metric("update_ratio")
    layers = data.own_layers()
    if not ur.size or not layers:
        return []
    vals = ur[:, layers].astype(np.float64)
    vals = vals[np.isfinite(vals)]
    if not len(vals) or np.median(vals) >= t.update_ratio_low:
        return []
    return [Finding("optimizer", "learning_rate_too_low", "error",
                    f"the loss falls to the end but only {curve.progress:.0%} of its start ({curve.head:.4g} -> {curve.tail:.4g}), "
                    f"with a median update ratio of {np.median(vals):.3g} (healthy steps are near {10 * t.update_ratio_low:g}): "
                    "the steps are too small", 0.65)]


def _steady_fall(data: RunData) -> bool:
    """The loss's quarter means fall one after another: it is still falling when the run ends."""
    loss = data.steps["loss"].astype(np.float64)
    loss = loss[np.isfinite(loss)]
    if len(loss) < 20:
        return False
    q = np.array([part.mean() for part in np.array_split(loss, 4)])
    falls = q[:-1] - q[1:]
    return bool((falls > 0).all())


def _path(data: RunData, cause: Finding, findings: list[Finding]) -> list[str]:
    """From the root cause to where the anomaly shows, in forward order (modules with findings)."""
    if cause.module not in data.index:
        downstream = [f.module for f in findings if f.module in data.index and f.severity == "error"]
        return [cause.module] + sorted(set(downstream), key=lambda m: data.forward_rank()[data.index[m]])[:6]
    rank = data.forward_rank()
    start = rank[data.index[cause.module]]
    after = {f.module for f in findings if f.module in data.index and rank[data.index[f.module]] > start
             and f.severity in ("error", "warning") and f.kind != "frozen"}
    return [cause.module] + sorted(after, key=lambda m: rank[data.index[m]])[:8]
