"""Whether the loss is given what it expects: logits or probabilities, targets of its kind and shape, a mean.

Read off what the loss functions were given on measured steps (``observations`` of kind ``loss``):

- probabilities (every row in [0, 1], summing to 1) fed to a loss that applies log-softmax itself, or values in
  [0, 1] fed to one that applies a sigmoid itself: the model's output layer applies it a second time; values
  above 0 fed to nll_loss, which expects log-probabilities;
- targets the loss cannot mean: a binary cross-entropy's targets outside [0, 1]; a regression loss whose
  input and target shapes broadcast to a larger one ([B, 1] against [B]); outputs whose range cannot reach
  the targets (a sigmoid or ReLU output for targets below zero); class indices fed to a regression loss;
- a loss summed over a large batch where training goes wrong: every step scaled by the batch size;
- a first cross-entropy many times ln(C): the output layer starts with logits far too large.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import kinds
from ..thresholds import Thresholds
from .data import ADAPTIVE, REGRESSION, RunData
from .findings import Finding
from .losscurve import LossCurve

LOGIT_LOSSES = {"cross_entropy"}  # apply log-softmax to their input
LOGIT_BINARY = {"binary_cross_entropy_with_logits"}  # apply a sigmoid to their input
BINARY = {"binary_cross_entropy", "binary_cross_entropy_with_logits"}
MEAN_LOSSES = REGRESSION | BINARY | {"cross_entropy", "nll_loss"}


def _share(calls: list[dict[str, Any]], test: Any) -> float:
    hits = [bool(test(c)) for c in calls]
    return sum(hits) / len(hits) if hits else 0.0


def _broadcast(a: list[int], b: list[int]) -> list[int] | None:
    """The shape ``a`` and ``b`` broadcast to, None when they do not."""
    out = []
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    longer = a if len(a) > len(b) else b
    return list(reversed(out)) if len(a) == len(b) else longer[: abs(len(a) - len(b))] + list(reversed(out))


def _output_layer(d: RunData) -> str | None:
    """The last layer in forward order (the one producing the model's output)."""
    rank = d.forward_rank()
    layers = sorted(d.own_layers(), key=lambda i: rank[i])
    # (a layer whose forward never runs, an attention's out_proj used through its weights, is not the last to run)
    _, act = d.metric("act_max")
    ran = [i for i in layers if act.size and np.isfinite(act[:, i].astype(np.float64)).any()]
    return d.modules[(ran or layers)[-1]].name if layers else None


def detect(d: RunData, t: Thresholds, curve: LossCurve, trouble: bool) -> list[Finding]:
    """``trouble``: the run diverged, spiked or went non-finite (a summed loss matters then)."""
    out: list[Finding] = []
    by_loss: dict[str, list[dict[str, Any]]] = {}
    first: dict[str, int] = {}
    for o in d.observed("loss"):
        name = str(o.data.get("loss"))
        by_loss.setdefault(name, []).append({**o.data, "step": o.step})
        first.setdefault(name, o.step)
    head = _output_layer(d)
    for name, calls in by_loss.items():
        st = first[name]
        probs = _share(calls, lambda c: c.get("input_min") is not None and c["input_min"] >= 0 and c["input_max"] <= 1.0 + 1e-6)
        if name in LOGIT_LOSSES and probs >= 0.8 and _share(calls, lambda c: (c.get("input_rowsum_dev") or 1.0) < 1e-3) >= 0.8:
            out.append(Finding(kinds.LOSS, kinds.DOUBLE_SOFTMAX, "error",
                               f"{name} is given probabilities (every row in [0, 1], summing to 1) but applies log-softmax itself: "
                               "the model's output goes through softmax twice, and its gradients shrink", 0.95, st))
        # log-probabilities are never above 0: an nll_loss given values above it scores probabilities (a softmax where
        # log_softmax was meant: the loss runs from -1 to 0 and its gradient does not grow as the model errs) or raw logits
        positive = _share(calls, lambda c: c.get("input_max") is not None and c["input_max"] > 1e-6)
        # (or rows whose exponentials do not sum to 1: raw scores, below 0 as a model may push them)
        unnormalised = _share(calls, lambda c: (c.get("input_lse_dev") or 0.0) > 0.1)
        if name in ("nll_loss", "ctc_loss") and (positive >= 0.8 or unnormalised >= 0.8):
            as_probs = probs >= 0.8 and _share(calls, lambda c: (c.get("input_rowsum_dev") or 1.0) < 1e-3) >= 0.8
            given = "probabilities (every row in [0, 1], summing to 1)" if as_probs else (
                f"values up to {max(c['input_max'] for c in calls):.3g}" if positive >= 0.8 else
                f"scores whose exponentials do not sum to 1 over the classes (log-sum-exp up to "
                f"{max(float(c.get('input_lse_dev') or 0.0) for c in calls):.3g} from 0)")
            out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                               f"{name} is given {given}, but it expects log-probabilities (never above 0): "
                               + ("it returns minus the true class's input, so the loss is not a likelihood (log_softmax on the "
                                  "output, or cross_entropy on the logits)" if name == "nll_loss" else
                                  "the alignments it sums are not probabilities, so the loss is not a likelihood (log_softmax over "
                                  "the classes first)"), 0.95 if as_probs else 0.85, st))
        # (values that are all exactly 0 are a dead ReLU's, not a sigmoid's, which never reaches 0 or 1)
        constant_zero = all(c.get("input_min") == 0 and c.get("input_max") == 0 for c in calls)
        if name in LOGIT_BINARY and probs >= 0.8 and not constant_zero:
            out.append(Finding(kinds.LOSS, kinds.DOUBLE_SIGMOID, "error",
                               f"{name} is given values in [0, 1] (from {min(c['input_min'] for c in calls):.3g} to "
                               f"{max(c['input_max'] for c in calls):.3g}) but applies a sigmoid itself: the output goes "
                               "through a sigmoid twice (use BCELoss on probabilities, or drop the sigmoid)", 0.95, st))
        smooth = [float(c.get("label_smoothing") or 0.0) for c in calls]
        if name == "cross_entropy" and min(smooth) >= t.label_smoothing_high:
            k = next((c["input_shape"][1] for c in calls if len(c["input_shape"]) >= 2), None)
            mass = f" ({1 - smooth[0] + smooth[0] / k:.2g} on the true class, {smooth[0] / k:.2g} on each other)" if k else ""
            out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                               f"cross_entropy smooths its labels by {smooth[0]:g}: the targets it fits spread most of their mass "
                               f"over the wrong classes{mass}, so the loss floor is near chance and little is learned "
                               "(label_smoothing is the share taken from the true class, usually 0.1)", 0.9, st))
        if name in BINARY:
            outside = _share(calls, lambda c: c.get("target_min") is not None and (c["target_min"] < -1e-6 or c["target_max"] > 1 + 1e-6))
            if outside >= 0.5:
                lo = min(c["target_min"] for c in calls)
                hi = max(c["target_max"] for c in calls)
                out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                                   f"{name}'s targets run from {lo:.3g} to {hi:.3g}; a binary cross-entropy needs them in [0, 1] "
                                   "(labels as -1/+1, or images scaled to [-1, 1]?)", 1.0, st))
        if name in BINARY and _share(calls, lambda c: c.get("target_distinct") == 2 and c.get("target_min") is not None
                                     and 0.2 < c["target_min"] and c["target_max"] < 0.8) >= 0.8:
            lo, hi = min(c["target_min"] for c in calls), max(c["target_max"] for c in calls)
            out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                               f"{name}'s targets are only {lo:.3g} and {hi:.3g}: labels smoothed so far towards 0.5 that positives and "
                               "negatives differ by little, and so does what the model learns (label smoothing of 0.9 where 0.1 was "
                               "meant?)", 0.9, st))
        # a square [B, B] score matrix (a contrastive loss: row i's own pair is column i) whose targets reach only a few
        # of its columns: the targets are class ids, not the pair's index (torch.arange(B))
        square = [c for c in calls if len(c["input_shape"]) == 2 and c["input_shape"][0] == c["input_shape"][1] >= 16]
        if name == "cross_entropy" and len(square) >= 0.8 * len(calls) and _share(
                square, lambda c: c.get("target_max") is not None and c["target_max"] + 1 <= c["input_shape"][0] / 4) >= 0.8:
            c = square[0]
            out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                               f"cross_entropy scores a square {c['input_shape']} matrix (each row against every column of the batch, as "
                               f"a contrastive loss does) but its targets only reach column {int(c['target_max'])}: they are class ids, "
                               "not each row's own pair (torch.arange of the batch)", 0.85, st))
        if name in REGRESSION | BINARY | {"gaussian_nll_loss", "poisson_nll_loss"}:
            wider = [c for c in calls if c["input_shape"] != c["target_shape"]]
            if wider:
                c = wider[0]
                shape = _broadcast(c["input_shape"], c["target_shape"])
                n_in, n_t = math.prod(c["input_shape"]), math.prod(c["target_shape"])
                if shape is not None and math.prod(shape) > max(n_in, n_t):
                    out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                                       f"{name} compares an input of shape {c['input_shape']} with targets of shape {c['target_shape']}: "
                                       f"they broadcast to {shape}, every prediction against every target (PyTorch warns of this)", 1.0, st))
        if name in REGRESSION:
            below = _share(calls, lambda c: c.get("target_min") is not None and c["target_min"] < -0.05 * max(abs(c["target_max"]), 1e-6))
            # outputs that vary (a collapsed, near-constant output, tiny weights' first steps, says nothing of their range)
            # and are never negative, or
            # that are pinned to 0 itself, the floor of a sigmoid or ReLU the loss pushed them onto
            nonneg = _share(calls, lambda c: c.get("input_min") is not None and c["input_min"] >= 0
                            and (c["input_max"] - c["input_min"] > 1e-3 * (c["target_max"] - c["target_min"])
                                 or c["input_max"] < 1e-3 * (c["target_max"] - c["target_min"])))
            # and the floor shows: outputs pinned at 0 (a ReLU's), held inside [0, 1] (a sigmoid's), or a loss that cannot
            # fall; positive outputs of a few sampled batches whose targets are mostly positive say nothing by themselves
            unit = probs >= 0.8
            floored = _share(calls, lambda c: (c.get("input_zero_frac") or 0) > 0) >= 0.5
            if below >= 0.8 and nonneg >= 0.8 and (floored or unit or _struggles(curve, 0.5)):
                out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                                   f"the model's outputs are never below 0{' and never above 1' if unit else ''} "
                                   f"({'a sigmoid' if unit else 'a ReLU'} on the output?), but {name}'s targets go down to "
                                   f"{min(c['target_min'] for c in calls):.3g}: the output cannot reach them", 0.9, st))
            # targets in raw units (kW, 0-255 pixels) beside outputs that start near 0: the output must grow by orders of
            # magnitude, and the squared error's huge gradients blow the weights about before it can (the exploding
            # gradients are its symptom); a net that gets there anyway is left alone
            c0 = calls[0]
            reach = max(abs(c0["target_min"]), abs(c0["target_max"])) if c0.get("target_min") is not None else 0.0
            size = max(abs(c0.get("input_min") or 0.0), abs(c0.get("input_max") or 0.0))
            if (reach >= t.target_raw_units and reach >= 1000 * max(size, 1e-12) and math.isfinite(curve.progress)
                    and curve.progress < 0.2):
                out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                                   f"{name}'s targets reach {reach:.4g} while the model's outputs start within {size:.3g}: the "
                                   "targets are in raw units (standardise them, or scale them to the output's range), and the "
                                   f"loss fell only {max(0.0, curve.progress):.0%}", 0.85, st))
            indices = _share(calls, lambda c: c.get("target_integral") and c.get("target_min") == 0 and 3 <= (c.get("target_distinct") or 0) <= 20)
            if indices >= 0.8 and _struggles(curve, 0.5):
                k = max(c.get("target_distinct") or 0 for c in calls)
                out.append(Finding(kinds.LOSS, kinds.LOSS_TARGET_MISMATCH, "error",
                                   f"{name} is fitted to targets that look like class indices (the integers 0..{k - 1}): a "
                                   "classification trained as regression (use CrossEntropyLoss on logits)", 0.7, st))
        zeros = _share(calls, lambda c: c.get("input_min") == 0 and (c.get("input_zero_frac") or 0) >= 0.3)
        # (a loss that falls most of the way through them: zeros where the targets are zero, a sigmoid's saturated
        # background, not a dead output)
        if zeros >= 0.8 and head is not None and _struggles(curve, 0.8):
            frac = float(np.median([c.get("input_zero_frac") or 0 for c in calls]))
            out.append(Finding(head, kinds.DEAD_UNITS, "error",
                               f"{frac:.0%} of the model's outputs given to {name} are exactly 0 and none is negative: the output goes "
                               "through a ReLU, whose zeros pass no gradient back", min(1.0, 0.5 + frac / 2), st))
        summed = [c for c in calls if c.get("reduction") == "sum" or _summed_by_hand(d, c)]
        is_summed = bool(summed) and len(summed) >= 0.8 * len(calls)
        batch = int(summed[0]["input_shape"][0]) if is_summed and summed[0]["input_shape"] else 1
        # an adaptive optimizer divides the gradient's scale away: a sum matters to SGD-like steps (or when it blows up)
        scale_matters = trouble or (d.optimizer_type not in ADAPTIVE and (_struggles(curve, 0.5) or curve.rose))
        # a sum is over every term the mean would average: the batch's rows, times the positions of a per-pixel or
        # per-token loss (its targets' elements)
        terms = max(batch, math.prod(summed[0]["target_shape"])) if is_summed and summed[0].get("target_shape") else batch
        if name in MEAN_LOSSES and scale_matters and is_summed and batch >= 16:
            rows = f"{batch} rows" if terms == batch else f"{batch} rows x {terms // max(1, batch)} positions"
            how = "reduction='sum'" if summed[0].get("reduction") == "sum" else "its per-row terms summed by the script"
            out.append(Finding(kinds.LOSS, kinds.LOSS_SCALE_TOO_HIGH, "error",
                               f"{name} sums over the batch ({how}, {rows}) instead of averaging: every gradient, "
                               f"and so every step, is {terms}x what the learning rate was chosen for", 0.9, first[name]))
        if name == "cross_entropy" and head is not None:
            classes = [c["input_shape"][1] for c in calls if len(c["input_shape"]) >= 2 and c["input_shape"][1] > 1]
            # the cross-entropy's own value at its first measured call: the step's loss may be it scaled (a static loss
            # scale) or summed with other terms (a distillation's KL), which say nothing of the logits' size:
            # (the first step's loss when it is the cross-entropy alone; else the first call measured, which may come
            # after the first step: it speaks for the initial weights when the first update did not move the loss much)
            value = calls[0].get("value")
            own = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
            first_loss, at = math.nan, st
            if len(by_loss) == 1 and d.n_steps and math.isfinite(float(d.steps["loss"][0])) and (own is None or _is_step_loss(d, st, own)):
                first_loss, at = float(d.steps["loss"][0]), int(d.steps["step"][0])  # the step's loss is the cross-entropy
            elif own is not None and _unmoved(d, st):
                first_loss = own
            if classes and math.isfinite(first_loss):
                ln_c = math.log(classes[0])
                per_row = first_loss / (max(1, terms) if is_summed else 1)
                if per_row > t.initial_loss_over_log_classes * ln_c and per_row > ln_c + 2:
                    out.append(Finding(head, kinds.POOR_INITIALIZATION, "error",
                                       f"the cross-entropy at step {at} is {first_loss:.4g}, {first_loss / ln_c:.3g}x ln({classes[0]}) = {ln_c:.3g}, "
                                       "what an output layer that starts near zero gives: its logits start far too large", 0.85, at,
                                       mechanism=True))  # (the loss shows it at the first step: no activation need be out of range)
    return out


def _step_loss(d: RunData, step: int) -> float | None:
    """The step's recorded loss at ``step`` (None when that step is not recorded)."""
    k = int(np.searchsorted(d.steps["step"], step))
    return float(d.steps["loss"][k]) if k < d.n_steps and d.steps["step"][k] == step else None


def _is_step_loss(d: RunData, step: int, value: float) -> bool:
    """The step's recorded loss at ``step`` is the loss call's own value (not scaled, not summed with others)."""
    rec = _step_loss(d, step)
    if rec is None:
        return True  # (nothing to tell them apart: as before, the step's loss)
    return math.isfinite(rec) and abs(rec - value) <= 0.01 * max(abs(value), 1e-12)


def _unmoved(d: RunData, step: int) -> bool:
    """The step's loss at ``step`` is within 2x of the run's first: no update before it blew the loss up."""
    rec = _step_loss(d, step)
    if rec is None or not d.n_steps or not (math.isfinite(float(d.steps["loss"][0])) and math.isfinite(rec)):
        return False
    a, b = abs(float(d.steps["loss"][0])), abs(rec)
    return b <= 2.0 * a + 1e-12 and a <= 2.0 * b + 1e-12


def _summed_by_hand(d: RunData, call: dict[str, Any]) -> bool:
    """Per-element terms (reduction='none') that the script sums: the step's loss is about their number times
    their mean (a mean of them would be about their mean)."""
    mean, terms = call.get("value_mean"), call.get("terms")
    if call.get("reduction") != "none" or not isinstance(mean, (int, float)) or not isinstance(terms, int) or terms < 16 or mean <= 0:
        return False
    rec = _step_loss(d, int(call["step"]))
    return rec is not None and math.isfinite(rec) and 0.5 * terms <= rec / mean <= 2.0 * terms


def _struggles(curve: LossCurve, below: float) -> bool:
    """The loss does not fall, falls by less than ``below`` of its start, or does not stay finite."""
    p = curve.progress
    return curve.not_decreasing or curve.diverging or not math.isfinite(p) or p < below


def dropout(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    """A dropout rate that drops most units, in a module or called as F.dropout, while training struggles."""
    out: list[Finding] = []
    rates: dict[str, float] = {}
    attn: dict[str, float] = {}
    for m in d.modules:
        p = (m.config or {}).get("p")
        if m.type.startswith("Dropout") and isinstance(p, (int, float)):
            rates[m.name] = float(p)
        # nn.MultiheadAttention drops its attention weights inside its own forward (no Dropout module to see)
        inner = (m.config or {}).get("dropout")
        if m.type == "MultiheadAttention" and isinstance(inner, (int, float)) and inner > 0:
            attn[m.name] = float(inner)
    for o in d.observed("dropout"):
        # an F.dropout in a forward is named by the module its output feeds (where its inputs go missing)
        # (called outside any module, in a functional model's forward: the model as a whole)
        feeds = o.data.get("feeds")
        where: str = feeds if isinstance(feeds, str) else (o.module if o.module is not None else "")
        if o.data.get("training") and isinstance(o.data.get("p"), (int, float)):
            rates[where] = max(rates.get(where, 0.0), float(o.data["p"]))
    # (named at the attention only when no Dropout module drops as much: a layer's one rate set for both is the layer's)
    rates.update({k: v for k, v in attn.items() if all(r < v for r in rates.values())})
    _, mode = d.metric("training")
    # transformers train with dropout near 0.1: at half or more on several of their layers (every sublayer's
    # output, the attention weights) a model that learns slowly is held back by it, though an MLP's 0.5 is classic
    attentive = bool(d.observed("attention")) and sum(p >= t.dropout_high_attention for p in rates.values()) >= 2
    for name, p in rates.items():
        if p < t.dropout_high and not (attentive and p >= t.dropout_high_attention and _struggles(curve, 0.6)):
            continue
        i = d.index.get(name)
        if i is not None and mode.size and np.isfinite(mode[:, i]).any() and not (mode[:, i][np.isfinite(mode[:, i])] == 1).any():
            continue  # never run in training mode
        # p >= 0.85 drops nearly every unit: wrong whatever the loss does; a lower high rate when training struggles
        poor = p >= 0.85 or _struggles(curve, 0.8)
        why = ("a keep-probability written as a drop rate?" if p >= t.dropout_high else
               f"a transformer's layers are trained near 0.1, and the loss fell only {max(0.0, curve.progress):.0%}")
        out.append(Finding(name, kinds.DROPOUT_TOO_HIGH, "error" if poor else "warning",
                           f"dropout p={p:g} drops {p:.0%} of the units at every training step: the layers after it see a "
                           f"fraction of their inputs ({why})", min(1.0, 0.5 + p / 2), int(d.steps["step"][0])))
    return out
