"""Findings: what is wrong, where, since when, and how strongly, read off the records.

Each detector encodes how training fails (gradients grow or vanish through
depth, units die, activations leave their range, non-finite values appear and
spread, the loop mishandles gradients), never a scenario's name. A finding's
``strength`` (0-1) grows with how far past its threshold the evidence is and
how persistent it is; the health scores and the root cause's confidence use it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..store import UNREGISTERED
from ..thresholds import Thresholds
from .data import ADAPTIVE, CONTAINERS, EMBEDDINGS, NORMS, REGRESSION, SATURATING, RunData

OUTSIDE = ("loss", "optimizer", "input")  # faults outside the network


@dataclass
class Finding:
    module: str  # a module name, or loss / optimizer / input
    kind: str
    severity: str  # info | warning | error
    evidence: str
    strength: float  # 0..1
    step: int | None = None  # first step where it held
    direct: bool = True  # False when inferred from a consequence (zero gradients behind dead units, say)
    weight_growth: float = 1.0  # how many times the module's own weights grew over the run (out-of-range outputs)
    mechanism: bool = False  # names what makes its kind's symptom (a norm that does not normalise), ahead of the symptom's own findings

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.kind)


def _topmost(data: RunData, frozen: dict[int, int], kept: Callable[[dict[str, Any]], bool] = lambda p: bool(p["trainable"])) -> dict[int, int]:
    """Report frozen parameters at the highest module (below the root) whose parameters are all frozen (or, with
    ``kept``, all of another kind: left out of the optimizer)."""
    trainable: dict[str, bool] = {}
    for p in data.params:
        name = data.modules[p["module_id"]].name
        while True:
            trainable[name] = trainable.get(name, False) or kept(p)
            if not name:
                break
            name = name.rpartition(".")[0]
    out: dict[int, int] = {}
    for mid, n in frozen.items():
        name = data.modules[mid].name
        top = name
        while top:
            parent = top.rpartition(".")[0]
            if not parent or trainable.get(parent, True):
                break
            top = parent
        tid = data.index[top]
        out[tid] = out.get(tid, 0) + n
    return out


def merge(findings: list[Finding]) -> list[Finding]:
    """One finding per (module, kind): the strongest evidence, the earliest step."""
    best: dict[tuple[str, str], Finding] = {}
    for f in findings:
        old = best.get(f.key)
        if old is None:
            best[f.key] = f
            continue
        keep = f if f.strength > old.strength else old
        steps = [s for s in (f.step, old.step) if s is not None]
        sev = min((f.severity, old.severity), key=["error", "warning", "info"].index)
        best[f.key] = Finding(keep.module, keep.kind, sev, keep.evidence, keep.strength, min(steps) if steps else None,
                              f.direct or old.direct, mechanism=f.mechanism or old.mechanism)
    return list(best.values())


def _strength(ratio: float, span: float = 2.0) -> float:
    """0.5 at the threshold, 1.0 at ``span`` decades past it (ratio = value / threshold, >= 1)."""
    if not math.isfinite(ratio):
        return 1.0
    return float(min(1.0, 0.5 + 0.5 * math.log10(max(ratio, 1.0)) / span))


def _fmt(v: float) -> str:
    return f"{v:.3g}"


class Detector:
    def __init__(self, data: RunData, t: Thresholds, curve: Any = None) -> None:
        self.d = data
        self.t = t
        self.curve = curve  # the loss curve (losscurve.LossCurve): large gradients matter when the loss does not fall
        self.names = data.names
        self.types = [m.type for m in data.modules]
        self.layers = data.own_layers()
        self.rank = data.forward_rank()
        self.layers_fwd = sorted(self.layers, key=lambda i: self.rank[i])
        self.steps = data.steps["step"]
        self.loss = data.steps["loss"]
        self.out: list[Finding] = []

    def add(self, module: str, kind: str, severity: str, evidence: str, strength: float, step: int | None = None,
            direct: bool = True, weight_growth: float = 1.0) -> None:
        self.out.append(Finding(module, kind, severity, evidence, float(np.clip(strength, 0.0, 1.0)), step, direct, weight_growth))

    # -- helpers ------------------------------------------------------------------
    def producer(self, i: int) -> int:
        """The layer (with parameters) whose output module ``i`` works on: itself, or the one before it."""
        if i in self.layers:
            return i
        before = [j for j in self.layers_fwd if self.rank[j] < self.rank[i]]
        return before[-1] if before else i

    def layer_before(self, i: int) -> int | None:
        before = [j for j in self.layers_fwd if self.rank[j] < self.rank[i]]
        return before[-1] if before else None

    def _rows_without_gradient(self, owner: int, dead: float) -> bool:
        """Units dead at a layer's output give its weights' rows no gradient: True unless the layer's gradients are
        recorded and hardly any of them is zero (then the zeros a later layer reads were not made by its units)."""
        _, zf = self.sampled("grad_zero_frac")
        if not zf.size:
            return True
        col = zf[:, owner].astype(np.float64)
        col = col[np.isfinite(col)]
        return not len(col) or float(np.median(col)) >= 0.25 * dead

    def sampled(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        return self.d.metric(kind)

    def weight_growth(self, i: int) -> float:
        """How many times the module's own weight norm grew over the run (1 when unknown)."""
        _, w = self.sampled("weight_norm")
        if not w.size or self.d.modules[i].own_params == 0:
            return 1.0
        col = w[:, i].astype(np.float64)
        col = col[np.isfinite(col)]
        if len(col) < 2 or col[0] <= 0:
            return 1.0
        return float(col.max() / col[0])

    # -- detectors -------------------------------------------------------------------
    def run(self) -> list[Finding]:
        for fn in (self.triggers, self.nonfinite, self.exploding, self.vanishing, self.dead, self.saturation, self.out_of_range,
                   self.initialization, self.update_ratio, self.parameters, self.loop, self.input, self.softmax_loss):
            fn()
        return merge(self.out)

    def diverged_before(self, step: int) -> str:
        """How the run blew up in the steps before ``step`` (empty when it did not)."""
        before = self.steps < step
        g = self.d.steps["grad_norm"][before]
        g = g[np.isfinite(g)]
        if len(g) >= 2:
            base = float(np.median(g[: max(1, min(10, len(g) // 2))]))
            top = float(g[-5:].max())
            if base > 0 and top > 100 * base:
                return f"gradient norm rose {top / base:.3g}x, to {top:.3g}"
        loss = self.loss[before]
        loss = loss[np.isfinite(loss)]
        if len(loss) >= 2 and loss.min() > 0 and loss[-3:].max() > 100 * loss.min():
            return f"loss rose {loss[-3:].max() / loss.min():.3g}x"
        return ""

    def learning_well(self) -> bool:
        """The loss falls steadily to well below its start, with no spike and no divergence: large gradients
        (large-scale targets, a deep net) are then how this model trains, not an explosion."""
        c = self.curve
        if c is None or c.spike_step is not None or c.diverging or c.oscillating or c.not_decreasing:
            return False
        return bool(np.isfinite(c.head) and np.isfinite(c.tail) and c.head > 0 and c.tail < 0.5 * c.head
                    and np.isfinite(self.loss).all())

    @cached_property
    def steady(self) -> bool:
        """The loss falls by a good share of its start and ends near its lowest, with no spike it did not recover
        from, no divergence or oscillation: units that stop firing then are the model's sparse solution, not a
        failure (a loss with a high floor, a reconstruction's, need not halve)."""
        c = self.curve
        if c is None or (c.spike_step is not None and not c.spike_recovered) or c.diverging or c.oscillating or c.not_decreasing:
            return False
        fin = self.loss[np.isfinite(self.loss)]
        if len(fin) < 20 or len(fin) < len(self.loss) or not (np.isfinite(c.head) and np.isfinite(c.tail)) or c.head <= 0:
            return False
        if fin[0] > 0 and float(fin.max()) > 10 * float(fin[0]):
            return False  # it blew up on the way (a recovered spike of orders of magnitude is no steady fall)
        # "near its lowest": the tail (the median of the last fifth) beside the lowest median of any fifth of the run,
        # the same statistic over the same length (the lowest of short means is a noisy loss's luckiest stretch)
        k = max(3, len(fin) // 5)
        windows = np.lib.stride_tricks.sliding_window_view(fin, k)[:: max(1, k // 10)]  # (~50 windows: linear in steps)
        lowest = float(np.median(windows, axis=1).min())
        # (a loss that may go below 0, a density's negative log-likelihood: near its lowest against the fall it made)
        near = c.tail <= 1.5 * lowest if lowest > 0 else c.tail - lowest <= 0.1 * (c.head - lowest)
        return bool(c.tail < (1.0 - self.t.loss_progress_steady) * c.head and near)

    @cached_property
    def scale_free(self) -> bool:
        """An adaptive optimizer divides the gradient's scale away: with a steadily falling loss, large gradient
        norms (a loss summed rather than averaged, say) are not steps that blow up."""
        return self.steady and self.d.optimizer_type in ADAPTIVE

    def triggers(self) -> None:
        """The runtime's own trigger events that name a layer are direct evidence."""
        kinds = {"grad_explode": "exploding_gradient", "vanishing": "vanishing_gradient", "dead_units": "dead_units"}
        well = self.learning_well()
        for e in self.d.events:
            kind = kinds.get(e.name)
            if e.kind == "trigger" and kind and e.module and e.module in self.d.index:
                if kind == "exploding_gradient" and (well or self.scale_free):
                    continue  # large but healthy: judged by exploding() against the run's own history
                if kind == "dead_units" and self.steady:
                    continue  # judged by dead(), which names them a warning while the loss falls
                if kind == "dead_units" and self._flows_after(e.module, e.step):
                    continue  # zero only until a zero-initialised layer after it moved: nothing in it died
                if kind == "vanishing_gradient" and e.step is not None and self.converged(np.array([e.step]), self.t.converged_share)[0]:
                    continue  # the loss is ~0 against its start: nothing is left to learn, so the gradients are small
                if kind == "vanishing_gradient" and self.steady:
                    continue  # the loss falls steadily to near its lowest through it: the layer's small gradients did not stop it
                # zero gradients may be the consequence of dead units further on: not direct evidence
                self.add(e.module, kind, "error", f"{e.name} trigger at step {e.step}: {e.message}", 0.7, e.step,
                         direct=kind != "dead_units" or "dead" in (e.condition or "") and "grad" not in (e.condition or ""))

    def _flows_after(self, module: str, step: int | None) -> bool:
        """The module's gradients, all zero at ``step``, are not zero on every later measured step (a zero-initialised
        output layer blocks the gradient on the first step only)."""
        steps, zero = self.d.metric("grad_zero_frac")
        i = self.d.index.get(module)
        if step is None or i is None or not zero.size:
            return False
        later = zero[steps > step, i]
        later = later[np.isfinite(later)]
        return len(later) >= 3 and bool((later < 0.5).all())

    def nonfinite(self) -> None:
        """Where non-finite values first appear: the input, a module's output, the loss, or a gradient made in
        the backward pass. The earliest step wins; at one step, the input before the forward before the loss
        before the backward. NaN at the end of a divergence is its consequence, not where it started."""
        first_act = self._first_bad_output()
        first_grad = self._first_bad_gradient()
        inp_steps, inp = self.d.input_stats
        first_inp = next((int(inp_steps[r]) for r in range(len(inp_steps)) if inp[r, 4] > 0), None)
        bad_loss = np.flatnonzero(self.d.steps["loss_finite"] == 0)
        first_loss = int(self.steps[bad_loss[0]]) if len(bad_loss) else None
        # where the runtime traced a non-finite loss to, in that step's autograd graph
        traced = next(((int(e.step), str(e.data["origin"])) for e in self.d.events
                       if e.kind == "trigger" and e.name == "nan_inf" and e.step is not None and e.data.get("origin")), None)
        if traced is not None and traced[1] == "input":
            first_inp = min(traced[0], first_inp) if first_inp is not None else traced[0]
        starts = [s for s in (first_inp, first_loss, first_act[0] if first_act else None, first_grad[0] if first_grad else None,
                              traced[0] if traced else None) if s is not None]
        if not starts:
            return
        start = min(starts)
        diverged = self.diverged_before(start)
        if diverged and first_inp != start:
            self.add("loss", "nan_inf", "error", f"the run diverged ({diverged}) until values overflowed at step {start}",
                     0.6, start, direct=False)
            return
        if first_inp == start:
            self.add("input", "nan_inf", "error", f"the input batch holds NaN/Inf values at step {start}", 1.0, start)
        elif traced is not None and traced[0] == start:
            where = traced[1]
            if where == "loss" or where not in self.d.index:
                self.add("loss", "nan_inf", "error", f"the loss is non-finite at step {start} while every module's output is finite "
                         "(traced in that step's autograd graph)", 1.0, start)
            else:
                self._nonfinite_at(self.d.index[where], start, "traced in that step's autograd graph")
        elif first_act is not None and first_act[0] == start:
            self._nonfinite_at(first_act[1], start, "first in forward order")
        elif first_loss == start:
            self.add("loss", "nan_inf", "error", f"the loss is {self.loss[bad_loss[0]]} at step {start} while the modules' outputs "
                     "looked finite", 0.8, start)
        elif first_grad is not None:
            module, how = self._backward_origin(first_grad[1])
            self.add(module, "nan_inf", "error", f"the loss is finite but gradients are not, first at step {start}: {how}", 0.9, start)

    def _first_bad_output(self) -> tuple[int, int] | None:
        """(step, module) of the first module output in forward order to hold NaN/Inf, on measured steps."""
        steps_a, act_nan = self.sampled("act_nan")
        for r, st in enumerate(steps_a):
            row = np.nan_to_num(act_nan[r], nan=0.0)
            if row.any():
                bad = {int(i) for i in np.flatnonzero(row > 0)}
                # a container's output is bad when a child's is: take modules with no bad descendant
                inner = [i for i in bad if not any(j != i and (not self.names[i] or self.names[j].startswith(self.names[i] + "."))
                                                   for j in bad)]
                return int(st), min(inner or bad, key=lambda k: self.rank[k])
        return None

    def _first_bad_gradient(self) -> tuple[int, list[int]] | None:
        """(step, layers) of the first step at which some layer's gradients hold NaN/Inf (their count is
        recorded at such steps); a step the GradScaler skipped is passed over: it handled them."""
        steps_g, gnan = self.sampled("nan_count")
        skipped = set(self.steps[np.nan_to_num(self.d.steps.get("skipped", np.zeros(len(self.steps)))) == 1].tolist())
        for r, st in enumerate(steps_g):
            if int(st) in skipped:
                continue
            row = np.nan_to_num(gnan[r], nan=0.0)
            cands = [i for i in self.layers if row[i] > 0]
            if cands:
                return int(st), cands
        return None

    # module types whose backward never turns a finite gradient non-finite
    _SAFE_BACKWARD = {"ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Dropout", "Dropout1d", "Dropout2d", "Identity",
                      "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool2d", "ELU", "Softplus"}

    def _nonfinite_at(self, i: int, step: int, how: str) -> None:
        """Module ``i``'s output is the first non-finite one. An affine layer (Linear, conv, embedding) with finite
        weights makes nothing non-finite of a finite input, short of overflow: when it sits inside a module of the
        user's own, the NaN was made by that module's own code just before it (a softmax over a row masked
        entirely to -inf, say), which is named."""
        parent = self.d.modules[i].parent
        inside = self.d.index.get(parent) if parent else None
        affine = self.types[i].startswith(("Linear", "Conv", "Embedding", "LazyLinear"))
        # (a dropout, an activation or a pooling has no weights, and makes no NaN of a finite input either)
        passes = self.types[i] in self._SAFE_BACKWARD and self.d.modules[i].own_params == 0
        if (affine or passes) and inside is not None and self.types[inside] not in CONTAINERS and (passes or self._weights_finite(i, step)):
            self.add(self.names[inside], "nan_inf", "error",
                     f"first non-finite output at step {step} in {self.names[i]!r} ({self.types[i]}, {how})"
                     f"{'' if passes else ', whose weights are finite'}: a {self.types[i]} makes no NaN of a finite input, "
                     f"so it came from {self.names[inside]!r}'s own computation before it", 1.0, step)
            return
        self.add(self.names[i], "nan_inf", "error", f"first non-finite output at step {step} (type {self.types[i]}; {how})", 1.0, step)

    def _weights_finite(self, i: int, step: int) -> bool:
        """The layer's weights are known finite at ``step`` or later (a weight made NaN at that step shows there)."""
        steps, w = self.sampled("weight_norm")
        rows = np.flatnonzero(steps >= step) if w.size else np.array([], dtype=int)
        return bool(len(rows)) and bool(np.isfinite(w[rows[0], i]))

    def _backward_origin(self, bad: list[int]) -> tuple[str, str]:
        """Where a backward pass made non-finite gradients. Backward runs from the output to the input: the
        layers after the last bad one (in forward order) got finite gradients, so they were made between that
        layer and the next: in a module there whose backward can make them, else in the layer itself. A module
        the runtime watched make them (an ``origin`` event) is named first."""
        made = next((e for e in self.d.events if e.kind == "origin" and e.data.get("where") == "backward" and e.module in self.d.index), None)
        if made is not None and made.module is not None:
            return made.module, made.message
        last = max(bad, key=lambda k: self.rank[k])
        after = [j for j in self.layers_fwd if self.rank[j] > self.rank[last]]
        upto = self.rank[after[0]] if after else 10**9
        parents = {m.parent for m in self.d.modules if m.parent is not None}
        between = [m.id for m in self.d.modules if m.name not in parents and self.rank[last] < self.rank[m.id] < upto
                   and m.own_params == 0 and m.type not in self._SAFE_BACKWARD]
        if between:
            i = max(between, key=lambda k: self.rank[k])
            return self.names[i], (f"its gradient reaching {self.names[last]!r} is non-finite while every layer after it gets finite "
                                   f"gradients: {self.names[i]!r} ({self.types[i]}) between them made them in its backward")
        return self.names[last], f"the last layer in forward order with non-finite gradients is {self.names[last]!r}"

    def exploding(self) -> None:
        steps, g = self.sampled("grad_norm")
        if not g.size:
            return
        early = max(1, min(len(steps) // 5, 20))
        for i in self.layers:
            col = g[:, i].astype(np.float64)
            fin = np.isfinite(col)
            if not fin.any():
                continue
            over = np.flatnonzero(fin & (col > self.t.layer_grad_norm))
            if len(over):
                top = float(np.nanmax(np.where(fin, col, np.nan)))
                base = float(np.nanmedian(col[:early])) if np.isfinite(col[:early]).any() else float("nan")
                growth = top / base if base and base > 0 else float("inf")
                if growth < 10 and self.learning_well():
                    continue  # large from the start and the loss falls well: this model's scale, not an explosion
                self.add(self.names[i], "exploding_gradient", "warning" if self.scale_free else "error",
                         f"gradient norm {_fmt(top)} > {self.t.layer_grad_norm:g} (first at step {int(steps[over[0]])}; "
                         f"{_fmt(growth)}x its early median {_fmt(base)})", _strength(top / self.t.layer_grad_norm), int(steps[over[0]]))
        # gradients growing toward the input: first/last layer ratio (AUTOTRAINER)
        fwd = [i for i in self.layers_fwd if self.types[i] not in EMBEDDINGS]
        if len(fwd) >= 3:
            first, last = g[:, fwd[0]].astype(np.float64), g[:, fwd[-1]].astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = first / last
            ok = np.isfinite(ratio)
            if ok.sum() >= 3 and np.median(ratio[ok]) > self.t.exploding_ratio:
                med = float(np.median(ratio[ok]))
                self.add(self.names[fwd[0]], "exploding_gradient", "warning",
                         f"gradient norm of the first layer is {_fmt(med)}x the last layer's (> {self.t.exploding_ratio:g})",
                         _strength(med / self.t.exploding_ratio) * 0.8)

    def vanishing(self) -> None:
        steps, mean = self.sampled("grad_mean")
        fwd = [i for i in self.layers_fwd if self.types[i] not in EMBEDDINGS]
        # gradients of a loss already ~0 against its start are small because nothing is left to learn
        if mean.size and fwd:
            learning = ~self.converged(steps, self.t.converged_share)
            for i in fwd:
                col = mean[:, i].astype(np.float64)
                fin = np.isfinite(col) & learning
                if fin.sum() < 2:
                    continue
                low = fin & (col < self.t.vanishing_mean_grad) & (col > 0)
                if low.sum() >= max(2, 0.5 * fin.sum()):
                    med = float(np.median(col[fin]))
                    self.add(self.names[i], "vanishing_gradient", "error",
                             f"mean |grad| {_fmt(med)} < {self.t.vanishing_mean_grad:g} on {int(low.sum())} of {int(fin.sum())} sampled steps",
                             _strength(self.t.vanishing_mean_grad / max(med, 1e-30), span=3), int(steps[np.flatnonzero(low)[0]]))
        # through depth: the first layer's gradient a tiny fraction of the last layer's (AUTOTRAINER)
        gsteps, g = self.sampled("grad_norm")
        if g.size and len(fwd) >= 3:
            numel = np.array([max(1, self.d.modules[i].own_params) for i in fwd], dtype=np.float64)
            rms = g[:, fwd].astype(np.float64) / np.sqrt(numel)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = rms[:, 0] / rms[:, -1]
            ok = np.isfinite(ratio) & (ratio > 0) & ~self.converged(gsteps, self.t.converged_share)
            if ok.sum() >= 3:
                med = float(np.median(ratio[ok]))
                if med < self.t.vanishing_ratio:
                    already = any(f.kind == "vanishing_gradient" and f.module == self.names[fwd[0]] for f in self.out)
                    if not already:
                        self.add(self.names[fwd[0]], "vanishing_gradient", "error",
                                 f"RMS gradient of the first layer is {_fmt(med)} of the last layer's (< {self.t.vanishing_ratio:g})",
                                 _strength(self.t.vanishing_ratio / med, span=3), int(gsteps[np.flatnonzero(ok)[0]]))

    def converged(self, steps: np.ndarray, share: float = 0.02) -> np.ndarray:
        """Steps at which the loss is ~0 against its start (below ``share`` of it): units off then are a sparse
        solution, not dying; small gradients (below Thresholds.converged_share) are convergence, not vanishing."""
        loss = self.loss
        fin = loss[np.isfinite(loss)]
        if not len(fin) or fin[0] <= 0:
            return np.zeros(len(steps), dtype=bool)
        at = np.searchsorted(self.steps, steps).clip(0, len(loss) - 1)
        with np.errstate(invalid="ignore"):
            return np.asarray(np.abs(loss[at]) < share * abs(float(np.median(fin[: max(1, min(10, len(fin)))]))))

    def dead(self) -> None:
        seen: set[int] = set()
        severity = "warning" if self.steady else "error"
        for kind, limit in (("dead_frac", self.t.dead_units_frac), ("in_dead_frac", self.t.dead_units_frac)):
            steps, mat = self.sampled(kind)
            if not mat.size:
                continue
            learning = ~self.converged(steps)
            for i in range(mat.shape[1]):
                col = mat[:, i].astype(np.float64)
                fin = np.isfinite(col) & learning
                if fin.sum() < 1:
                    continue
                hit = fin & (col >= limit)
                if hit.sum() >= max(1, 0.5 * fin.sum()) and float(np.median(col[fin])) >= limit:
                    # the units that died belong to the layer producing them
                    owner = self.producer(i) if kind == "dead_frac" else self.layer_before(i)
                    if owner is None or owner in seen:
                        continue
                    if kind == "in_dead_frac" and not self._rows_without_gradient(owner, float(np.median(col[fin]))):
                        continue  # zeros at the input that the layer before did not make (a mask, the data): its units are alive
                    seen.add(owner)
                    med = float(np.median(col[fin]))
                    where = f"output of {self.names[i]!r}" if kind == "dead_frac" else f"input of {self.names[i]!r}"
                    # every unit of the layer off at every sampled step: the layer is cut out of the network, however
                    # well the rest of it (a residual path around it) makes the loss fall
                    whole = bool(hit.sum() == fin.sum() and float(col[fin].min()) >= 0.99)
                    self.add(self.names[owner], "dead_units", "error" if whole else severity,
                             f"{med:.0%} of the units are dead (zero for the whole batch) at the {where} on {int(hit.sum())} of "
                             f"{int(fin.sum())} sampled steps", min(1.0, 0.5 + med / 2), int(steps[np.flatnonzero(hit)[0]]))
        steps, zf = self.sampled("grad_zero_frac")
        in_steps, in_dead = self.sampled("in_dead_frac")
        if zf.size:
            for i in self.layers:
                if self.types[i] in EMBEDDINGS or i in seen:
                    continue
                col = zf[:, i].astype(np.float64)
                if in_dead.size:
                    # a weight whose input is zero for the whole batch (sparse inputs) has zero gradients: not dead units
                    # (the two are sampled at steps that may differ by one: take the input's nearest measured step)
                    at = np.searchsorted(in_steps, steps).clip(0, len(in_steps) - 1)
                    col = col - np.nan_to_num(in_dead[at, i].astype(np.float64), nan=0.0)
                fin = np.isfinite(col)
                hit = fin & (col >= self.t.dead_grad_frac)
                if fin.sum() and hit.sum() >= max(1, 0.5 * fin.sum()):
                    seen.add(i)
                    self.add(self.names[i], "dead_units", severity,
                             f"{float(np.median(col[fin])):.0%} of its gradients are exactly zero (>= {self.t.dead_grad_frac:.0%})",
                             0.8, int(steps[np.flatnonzero(hit)[0]]), direct=False)

    def saturation(self) -> None:
        steps, sat = self.sampled("sat_frac")
        if not sat.size:
            return
        for i in range(sat.shape[1]):
            if self.types[i] not in SATURATING:
                continue
            col = sat[:, i].astype(np.float64)
            fin = np.isfinite(col)
            if fin.sum() and np.median(col[fin]) > self.t.saturation_frac:
                med = float(np.median(col[fin]))
                owner = self.producer(i)
                # with the loss falling steadily to near its lowest, a saturated sigmoid is one that fits its targets
                self.add(self.names[owner], "saturation", "info" if self.steady else "warning",
                         f"{med:.0%} of the inputs of {self.names[i]!r} ({self.types[i]}) are beyond ±{self.t.saturation_level:g}",
                         min(1.0, med), int(steps[np.flatnonzero(fin & (col > self.t.saturation_frac))[0]]))

    def out_of_range(self) -> None:
        """Activations that leave their range: beyond the absolute limit, or grown tenfold past 100."""
        steps, mx = self.sampled("act_max")
        _, mn = self.sampled("act_min")
        if not mx.size:
            return
        mag = np.maximum(np.abs(mx.astype(np.float64)), np.abs(mn.astype(np.float64)))
        renormed = self.d.feeds_a_norm()
        # the model's output is meant to reach its regression targets, however large they are (pixel units)
        reach = self._regression_reach()
        at_output = self._output_end() if reach is not None else set()
        for i in range(mag.shape[1]):
            if not self.d.modules[i].name:  # the root's output is its last module's
                continue
            if i in at_output and reach is not None and np.nanmax(np.where(np.isfinite(mag[:, i]), mag[:, i], 0.0)) <= 2 * reach:
                continue
            col = mag[:, i]
            fin = np.isfinite(col)
            if fin.sum() < 1:
                continue
            start = col[fin][0]
            huge = fin & (col > self.t.activation_limit)
            grown = fin & (col > 100) & (col > 10 * max(start, 1e-6))
            hit = huge | grown
            if not hit.any():
                continue
            j = int(np.flatnonzero(hit)[0])
            top = float(col[fin].max())
            evidence = (f"output magnitude {_fmt(top)} (from {_fmt(start)} at step {int(steps[np.flatnonzero(fin)[0]])}; "
                        f"out of range from step {int(steps[j])})")
            strength = _strength(top / 100)
            growth = self.weight_growth(i)
            if growth > 3:  # its own weights grew with it: the cause is in this layer, not inherited
                evidence += f"; its weights grew {growth:.1f}x"
                strength = min(1.0, strength + 0.3)
            # weights that grow before a normalisation are SGD's answer to a large rate on a scale-invariant layer
            grew = growth > 3 and self.names[i] not in renormed
            severe = huge.any() or top > 1000 or grew
            if self.learning_well() and np.isfinite(col).all():
                # the loss falls steadily below half its start with every output finite: large outputs are how this
                # model fits (logits pushed far to saturate a sigmoid's background), not a failure
                self.add(self.names[i], "activation_out_of_range", "info", evidence + "; the loss falls steadily all the while",
                         0.3, int(steps[j]), weight_growth=growth)
                continue
            self.add(self.names[i], "activation_out_of_range", "error" if severe else "warning",
                     evidence, strength, int(steps[j]), weight_growth=growth)

    def initialization(self) -> None:
        """Weights far from a sane scale at the first step, or activations out of range from the very start."""
        steps, w = self.sampled("weight_norm")
        if not w.size:
            return
        shapes: dict[int, list[list[int]]] = {}
        largest: dict[int, tuple[int, int]] = {}  # module -> (its largest own parameter's id, numel): the weight matrix
        for p in self.d.params:
            shape = json.loads(p["shape"])
            shapes.setdefault(p["module_id"], []).append(shape)
            if p["numel"] > largest.get(p["module_id"], (-1, 0))[1]:
                largest[p["module_id"]] = (int(p["id"]), int(p["numel"]))
        first = w[0].astype(np.float64)
        # each parameter's own norm at the first sampled step, where recorded: the bias apart (a layer's bias keeps
        # PyTorch's default when an init loop sets only the weights, and its norm can be most of the layer's)
        psteps, pw = self.d.metric("param_weight_norm")
        own = pw[0].astype(np.float64) if pw.size and len(psteps) and psteps[0] == steps[0] else None
        judged: list[tuple[int, float]] = []
        for i in self.layers:
            shape = max(shapes.get(i, [[1]]), key=lambda s: int(np.prod(s)) if s else 1)
            numel = max(1, self.d.modules[i].own_params)
            rms = first[i] / math.sqrt(numel)
            pid, pnumel = largest.get(i, (-1, 0))
            if own is not None and 0 <= pid < len(own) and pnumel and math.isfinite(float(own[pid])):
                rms = float(own[pid]) / math.sqrt(pnumel)
            if not math.isfinite(rms):
                continue
            if self.types[i] in EMBEDDINGS:
                if shape and shape[-1] == 1:
                    continue  # a 1-wide table (a per-user bias) has no symmetry to break: any start, zero included, trains
                gain = rms  # embeddings: unit scale is the default
            elif len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                gain = rms * math.sqrt(fan_in)  # ~0.58 for PyTorch's default, ~1.4 for Kaiming
            elif self.types[i] in NORMS and len(shape) == 1:
                gain = rms  # a normalisation's gain: 1 by default
            else:
                continue
            judged.append((i, gain))
        # most layers started near zero: the signal vanishes through all of them at once, and no layer next to one
        # of them carries it (one zeroed layer among sane ones, a residual branch's last, trains by its neighbours)
        # (a chain of weight layers: embeddings looked up and multiplied, a factorisation's, start tiny on purpose)
        chain = [(i, gain) for i, gain in judged if self.types[i] not in EMBEDDINGS and self.types[i] not in NORMS]
        low = [i for i, gain in chain if gain < self.t.init_gain_low]
        all_low = len(low) >= max(2, 0.5 * len(chain))
        # most layers started too large: the signal grows through all of them (an init applied to every layer with
        # one std), so a layer of that chain halfway past the bound takes part too (the smallest fan-in's, first)
        high_chain = [i for i, gain in chain if gain > self.t.init_gain_high]
        all_high = len(high_chain) >= max(2, 0.5 * len(chain))
        if all_high:
            high_chain = [i for i, gain in chain if gain > self.t.init_gain_high / 2]
        # normalisations are judged among themselves, and only for a gain near zero: most gains at zero silence every
        # block after the first (one zero gain per residual block, its last, is the zero-init-residual recipe: they grow)
        norms = [i for i, _ in judged if self.types[i] in NORMS]
        low_norms = [i for i, gain in judged if self.types[i] in NORMS and gain < self.t.init_gain_low]
        norms_low = len(low_norms) >= max(2, 0.5 * len(norms))
        for i, gain in judged:
            norm = self.types[i] in NORMS
            high = self.t.embedding_rms_high if self.types[i] in EMBEDDINGS else math.inf if norm else self.t.init_gain_high
            if all_high and i in high_chain:
                high = self.t.init_gain_high / 2
            if gain > high or gain < self.t.init_gain_low:
                scale = "RMS" if self.types[i] in EMBEDDINGS or norm else "RMS x sqrt(fan-in)"
                default = "1" if self.types[i] in EMBEDDINGS or norm else "~0.6"
                evidence = f"initial weight scale {_fmt(gain)} ({scale}; PyTorch's default gives {default}"
                evidence += ")" if norm else f", healthy below {high:g})"
                chained = (norms_low and i in low_norms) if norm else (all_low and i in low)
                if chained:
                    evidence += (f"; {len(low_norms)} of {len(norms)} normalisations start this small" if norm
                                 else f"; {len(low)} of {len(chain)} layers start this small")
                elif all_high and i in high_chain:
                    evidence += f"; {len(high_chain)} of {len(chain)} layers start this large"
                grew = self._grew_from_zero(i, w) if gain < self.t.init_gain_low and not chained else None
                if grew is not None:
                    # a zero start blocks nothing while the gradient reaches the layer (it does unless the layer next to
                    # it is zero too or a ReLU's zeros stop it): the last layer of a residual branch or an output layer
                    # is zeroed on purpose; only weights that stay at zero are the fault
                    self.add(self.names[i], "poor_initialization", "info",
                             evidence + f"; its weights grew to {_fmt(grew)} of the other layers' scale, so the gradient reaches it", 0.2, int(steps[0]))
                    continue
                self.add(self.names[i], "poor_initialization", "error", evidence,
                         _strength(max(gain / high, self.t.init_gain_low / max(gain, 1e-30))), int(steps[0]))

    def _grew_from_zero(self, i: int, w: np.ndarray) -> float | None:
        """The layer's final weight RMS over the median of the other layers', when it is at least a tenth of it."""
        def last_rms(j: int) -> float:
            col = w[:, j].astype(np.float64)
            col = col[np.isfinite(col)]
            return float(col[-1]) / math.sqrt(max(1, self.d.modules[j].own_params)) if len(col) >= 2 else math.nan
        peers = [r for r in (last_rms(j) for j in self.layers if j != i) if math.isfinite(r) and r > 0]
        own = last_rms(i)
        if not peers or not math.isfinite(own):
            return None
        share = own / float(np.median(peers))
        return share if share >= 0.1 else None

    def update_ratio(self) -> None:
        steps, ur = self.sampled("update_ratio")
        if not ur.size:
            return
        for i in self.layers:
            col = ur[:, i].astype(np.float64)
            fin = np.isfinite(col)
            if fin.sum() < 2:
                continue
            med = float(np.median(col[fin]))
            if med > self.t.update_ratio_high:
                self.add(self.names[i], "update_ratio_too_high", "warning",
                         f"median update ratio mean|dW|/mean|W| {_fmt(med)} > {self.t.update_ratio_high:g}",
                         _strength(med / self.t.update_ratio_high) * 0.8)
            elif 0 < med < self.t.update_ratio_low:
                self.add(self.names[i], "update_ratio_too_low", "warning",
                         f"median update ratio mean|dW|/mean|W| {_fmt(med)} < {self.t.update_ratio_low:g}",
                         _strength(self.t.update_ratio_low / med) * 0.8)

    def parameters(self) -> None:
        has_opt = bool(self.d.run.get("optimizer"))
        frozen: dict[int, int] = {}
        unstepped: dict[int, list[str]] = {}
        for p in self.d.params:
            if not p["trainable"]:
                frozen[p["module_id"]] = frozen.get(p["module_id"], 0) + p["numel"]
            elif p["got_grad"] and not p["in_optimizer"] and has_opt:
                unstepped.setdefault(p["module_id"], []).append(p["name"])
        held = [p for p in self.d.params if p["trainable"] and p["in_optimizer"]]
        stepped = [p for p in self.d.params if p["in_optimizer"]]
        if has_opt and stepped and not held:
            # every parameter the optimizer steps is frozen: no step changes anything (it was given another model's,
            # frozen, parameters: a teacher's instead of the student's?)
            self.add("optimizer", "not_updated", "error",
                     f"every one of the {len(stepped)} parameter tensors the optimizer holds is frozen (requires_grad=False): its "
                     "steps change nothing (was it given another model's parameters?)", 1.0)
        if unstepped and not held and len(unstepped) >= 2:
            # not one of the model's parameters is in the optimizer: it holds others (a model built again, or a copy,
            # after the optimizer was made): the optimizer's fault, not each layer's
            n = sum(len(v) for v in unstepped.values())
            self.add("optimizer", "not_updated", "error",
                     f"none of the model's {n} trainable parameter tensors is in the optimizer, though they all receive gradients: "
                     "it holds other parameters (the model built again, or copied, after the optimizer was made?)", 1.0)
            unstepped = {}
        left = sum(p["numel"] for p in self.d.params if p["trainable"] and p["got_grad"] and not p["in_optimizer"])
        whole = 0 in unstepped and self.names[0] == ""  # the model's own parameters (a class token, say) are left out
        if has_opt and len(unstepped) >= 2 and (whole or left > sum(p["numel"] for p in held)):
            # most of the model is left out of the optimizer: it was built over a part of it (the head's parameters)
            kept = sorted({self.names[p["module_id"]] for p in held})
            out = _topmost(self.d, {mid: 1 for mid in unstepped}, lambda p: bool(p["trainable"] and p["in_optimizer"]))
            tops = sorted(self.names[mid] for mid in out)
            said = (f"the optimizer leaves out {', '.join(repr(t) for t in tops)}" if len(tops) < len(kept) and "" not in tops else
                    f"the optimizer holds only the parameters of {', '.join(repr(k) for k in kept[:3])}{' ...' if len(kept) > 3 else ''}")
            self.add("optimizer", "not_updated", "error",
                     f"{said}; {left:,} parameters in {len(unstepped)} modules receive gradients but are never updated", 1.0)
            unstepped = {}
        # named at the highest module left out as a whole (an encoder block, not each of its layers)
        left_out = _topmost(self.d, {mid: len(v) for mid, v in unstepped.items()}, lambda p: bool(p["trainable"] and p["in_optimizer"]))
        for top in left_out:
            name = self.names[top]
            names = [n for mid, v in unstepped.items() for n in v
                     if self.names[mid] == name or self.names[mid].startswith(name + ".") or not name]
            self.add(name, "not_updated", "error",
                     f"{', '.join(names[:4])}{f' and {len(names) - 4} more' if len(names) > 4 else ''} receive gradients but "
                     "no optimizer updates them", 1.0)
        for e in self.d.events:
            if e.kind == "warning" and e.name == UNREGISTERED:
                # layers kept in a plain list or dict: they run and get gradients, but the model does not hold them.
                # Named by the module whose attribute the list is (where it is fixed); older stores say it only in
                # the message ("block1.layers is a plain Python list ...")
                holder = str((e.data or {}).get("holder") or (e.message or "").partition(" is a plain ")[0].rpartition(".")[0])
                where = holder if holder in self.d.index else e.module if e.module in self.d.index else self.names[0]
                self.add(where, "not_updated", "error", e.message, 1.0)
        for mid, n in _topmost(self.d, frozen).items():
            self.add(self.names[mid], "frozen", "info", f"{n} parameters are frozen (requires_grad=False)", 0.5)
        # modules whose behaviour depends on train/eval mode, left in eval mode while the optimizer steps
        steps, mode = self.sampled("training")
        if mode.size and has_opt:
            for i, typ in enumerate(self.types):
                if typ.startswith(("BatchNorm", "Dropout", "InstanceNorm")) or typ in ("AlphaDropout",):
                    own = [p for p in self.d.params if p["module_id"] == i]
                    if own and not any(p.get("trainable") and p.get("in_optimizer") for p in own):
                        continue  # a norm frozen on purpose (fine-tuning): eval mode keeps its statistics fixed with it
                    col = mode[:, i]
                    fin = np.isfinite(col)
                    if fin.sum() and (col[fin] == 0).mean() >= 0.5:
                        self.add(self.names[i], "frozen", "error",
                                 f"{typ} runs in eval mode while the optimizer steps (model.eval() before training?): "
                                 "its statistics do not adapt to the data", 0.9, int(steps[np.flatnonzero(fin & (col == 0))[0]]))

    def loop(self) -> None:
        z = self.d.steps.get("grads_zeroed")
        if z is None:
            return
        known = z[np.isfinite(z)]
        if len(known) >= 3:
            stale = float((known[1:] == 0).mean())
            if stale >= 0.5:
                self.add("optimizer", "grads_not_zeroed", "error",
                         f"gradients were not zeroed between steps on {stale:.0%} of steps (no zero_grad(); they accumulate)",
                         0.7 + 0.3 * stale, int(self.steps[1 + int(np.argmax(known[1:] == 0))]))

    def input(self) -> None:
        steps, inp = self.d.input_stats
        if not len(steps):
            return
        mag = np.maximum(np.abs(inp[:, 0]), np.abs(inp[:, 1])).astype(np.float64)
        std = inp[:, 3].astype(np.float64)
        fin = np.isfinite(mag)
        if not fin.any():
            return
        med_mag, med_std = float(np.median(mag[fin])), float(np.nanmedian(std))
        if (med_std > 20 or med_mag > 200) and not self._scaled_within(med_mag):
            evidence = f"the input is not normalised: std {_fmt(med_std)}, magnitude up to {_fmt(float(mag[fin].max()))}"
            units = self._targets_in_input_units(med_mag)
            if units is not None:
                # an image-to-image (or signal-to-signal) model fitted in its data's own units: the whole problem is
                # scaled, not the input against what the model must output
                self.add("input", "activation_out_of_range", "info",
                         evidence + f"; the loss's targets are in the same units (up to {_fmt(units)}), so the problem is "
                         "scaled as a whole", 0.3, int(steps[np.flatnonzero(fin)[0]]))
                return
            absorbed = self._normalised_after_first_layer()
            if absorbed:
                # BN(W s x + b) = BN(W x + b / s): batch statistics undo any scale of the input, for the output and
                # for W's gradient alike, so the net trains as on scaled inputs
                self.add("input", "activation_out_of_range", "info",
                         evidence + f"; the first layer's output goes straight into {absorbed}, whose statistics undo "
                         "the scale", 0.3, int(steps[np.flatnonzero(fin)[0]]))
                return
            self.add("input", "activation_out_of_range", "error", evidence,
                     _strength(max(med_std / 20, med_mag / 200)), int(steps[np.flatnonzero(fin)[0]]))

    def _normalised_after_first_layer(self) -> str:
        """The batch or group norm that comes right after the model's first weight layer in the forward order ("" when none
        does): the layer is linear in the input, so the norm's batch statistics cancel the input's scale."""
        names = [m.name for m in self.d.modules]
        rank = self.d.forward_rank()
        leaves = sorted((m for m in self.d.modules if m.forward_order is not None
                         and not any(n.startswith(m.name + ".") for n in names if m.name)), key=lambda m: rank[m.id])
        first = next((k for k, m in enumerate(leaves) if m.type in ("Linear", "Conv1d", "Conv2d", "Conv3d")), None)
        if first is None or first + 1 >= len(leaves):
            return ""
        after = leaves[first + 1]
        # (a sample's own statistics, GroupNorm's or InstanceNorm's, cancel a scale too; a transformer's LayerNorm
        # normalises a branch of a residual stream that still carries the raw scale, so it does not)
        return f"'{after.name}' ({after.type})" if after.type.startswith(("BatchNorm", "GroupNorm", "InstanceNorm")) else ""

    def _target_tops(self) -> list[float] | None:
        """Each measured loss call's largest target magnitude, when every one is a regression (else None)."""
        calls = [o.data for o in self.d.observed("loss")]
        if not calls or any(c.get("loss") not in REGRESSION for c in calls):
            return None
        tops = [max(abs(float(c["target_min"])), abs(float(c["target_max"]))) for c in calls
                if isinstance(c.get("target_min"), (int, float)) and isinstance(c.get("target_max"), (int, float))]
        return tops if len(tops) == len(calls) and all(math.isfinite(v) for v in tops) else None

    def _targets_in_input_units(self, input_mag: float) -> float | None:
        """The largest target magnitude when every measured loss is a regression whose targets reach a quarter of the
        input's magnitude or more."""
        tops = self._target_tops()
        return max(tops) if tops and all(v >= input_mag / 4 for v in tops) else None

    def _regression_reach(self) -> float | None:
        tops = self._target_tops()
        return max(tops) if tops else None

    def _output_end(self) -> set[int]:
        """The last layer run, the containers holding it and the modules run after it: what makes the output."""
        if not self.layers_fwd:
            return set()
        last = self.layers_fwd[-1]
        out = {last} | {j for j in range(len(self.names)) if self.rank[j] > self.rank[last]}
        parent = self.d.modules[last].parent
        while parent is not None and parent in self.d.index:
            out.add(self.d.index[parent])
            parent = self.d.modules[self.d.index[parent]].parent
        return out

    def _scaled_within(self, input_mag: float) -> bool:
        """The model brings its input to scale before its layers see it (a standardisation in its forward, a norm
        layer first): the first affine or norm layer's outputs are small and a small fraction of the input's magnitude,
        and no later layer's come near that magnitude when training begins.
        (Every layer, not the first one run: a diffusion model's first layer embeds the timestep, not the input.)"""
        _, mn = self.sampled("act_min")
        _, mx = self.sampled("act_max")
        seen = False
        for i in self.layers_fwd:
            if not mx.size or not np.isfinite(mx[:, i]).any():
                continue
            if not self.types[i].startswith(("Linear", "Conv", "LazyLinear", "LazyConv")) and self.types[i] not in NORMS:
                if not seen:
                    return False  # (a recurrent layer first: its outputs are bounded whatever its input's scale)
                continue
            col = np.maximum(np.abs(mn[:, i]), np.abs(mx[:, i])).astype(np.float64)
            # the first: small, and far below the input; the later ones, at the first measured step (before training or
            # a dropout's rescaling grows them): well below it (a layer fed the raw input is near its magnitude)
            mag = float(np.nanmedian(col)) if not seen else float(col[np.isfinite(col)][0])
            if not (mag < 20 and mag < input_mag / 20 if not seen else mag < input_mag / 4):
                return False
            seen = True
        return seen

    def softmax_loss(self) -> None:
        """Probabilities fed to a loss that applies (log-)softmax itself."""
        loss_mods = str(self.d.run.get("loss_module") or "")
        if not any(n in loss_mods for n in ("CrossEntropyLoss", "NLLLoss")):
            return
        steps, mx = self.sampled("act_max")
        _, mn = self.sampled("act_min")
        if not mx.size:
            return
        order = sorted(range(len(self.names)), key=lambda i: self.rank[i])
        last = [i for i in order if self.names[i] and np.isfinite(mx[:, i]).any()]
        if not last:
            return
        i = last[-1]
        fin = np.isfinite(mx[:, i]) & np.isfinite(mn[:, i])
        # outputs in [0, 1] are probabilities only if rows sum to 1: where the loss's inputs were measured, lossfit
        # checks that; here, without them, the range is all there is
        measured = bool(self.d.observed("loss"))
        in_unit = fin.any() and (mn[fin, i] >= 0).all() and (mx[fin, i] <= 1.0 + 1e-6).all()
        if self.types[i] == "Softmax" or (in_unit and not measured):
            module = self.names[i] if self.types[i] in ("Softmax",) else "loss"
            self.add(module, "double_softmax", "error",
                     f"the model's output ({self.names[i]!r}, {self.types[i]}) is already probabilities in [0, 1], "
                     f"and {loss_mods} applies log-softmax again", 0.9)


