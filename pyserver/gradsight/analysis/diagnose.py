"""The diagnosis of a run: health per module and for the model, the anomaly, the root cause (fixes are chosen by
``gradsight.fixes``, which reads this).

Health (0-100). A module starts at 100 and loses, for each issue found on it,
``35 + 45 s`` for an error, ``10 + 20 s`` for a warning and ``2 + 3 s`` for an
info, where ``s`` is the issue's strength (0-1); the result is clamped to 0-100.
The model's health is the mean of the worst layer's and the average layer's
scores, less the same penalties for issues outside the layers (the loss, the
optimizer, the input) and for errors on modules that are not layers (the model
itself, a block), clamped to 0-100.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import kinds
from .. import thresholds as th
from ..store import NEVER_STEPPED
from . import attention, lossfit, normeps, optimizer, reach, scriptcheck, squashing
from .data import RunData, load
from .findings import OUTSIDE, Detector, Finding, merge
from .losscurve import analyse
from .rootcause import RootCause, find

SCHEMA = "gradsight.diagnosis/1"
PENALTY = {"error": (35.0, 45.0), "warning": (10.0, 20.0), "info": (2.0, 3.0)}


def penalty(f: Finding) -> float:
    base, scale = PENALTY[f.severity]
    return base + scale * f.strength


def health_of(issues: list[Finding]) -> int:
    return int(round(float(np.clip(100.0 - sum(penalty(f) for f in issues), 0, 100))))


def analyse_run(data: RunData, t: th.Thresholds) -> tuple[list[Finding], RootCause | None]:
    """Every finding of the run (each detector reads the records for one way training fails), and the root cause."""
    if not data.n_steps:  # (load() lets a run with no step through only when its optimizer never stepped)
        never = next(e for e in data.events if e.name == NEVER_STEPPED)
        f = Finding(kinds.OPTIMIZER, kinds.NOT_UPDATED, "error", never.message, 1.0, None)
        return [f], RootCause(f.module, f.kind, 1.0, [f.module], f.evidence, None)
    curve, loss_findings = analyse(data, t)
    findings = Detector(data, t, curve).run() + loss_findings
    trouble = curve.spike_step is not None or curve.diverging or any(f.kind == kinds.NAN_INF for f in findings)
    findings += reach.detect(data)
    findings += optimizer.detect(data, t, curve)
    findings += lossfit.detect(data, t, curve, trouble) + lossfit.dropout(data, t, curve) + squashing.detect(data, t, curve)
    findings += normeps.detect(data, curve)
    findings += attention.detect(data, t, curve)
    findings += scriptcheck.detect(data, curve.progress)
    findings = merge(findings)
    return findings, find(data, findings, curve, t)


def diagnose(path: str | os.PathLike[str], thresholds: th.Thresholds | None = None) -> Diagnosis:
    """The typed diagnosis of a store (``.as_json()`` gives the ``gradsight diagnose --json`` contract)."""
    data = load(os.fspath(path))
    t = thresholds or thresholds_for(data)
    findings, cause = analyse_run(data, t)
    return assemble(data, findings, cause)


def thresholds_for(data: RunData) -> th.Thresholds:
    where = data.run.get("cwd") or os.getcwd()
    try:
        return th.load(where if os.path.isdir(where) else os.getcwd())
    except th.ThresholdError:
        return th.Thresholds()


@dataclass(frozen=True)
class Issue:
    kind: str
    severity: str
    evidence: str


@dataclass(frozen=True)
class LayerHealth:
    module: str
    type: str
    health: int
    issues: tuple[Issue, ...]
    source: tuple[str, int] | None  # (file, line) of the line that creates the module


@dataclass(frozen=True)
class Diagnosis:
    """What ``diagnose`` finds; the JSON contract (DESIGN.md) is made from it at the edge by :meth:`as_json`."""

    anomaly: dict[str, Any] | None
    health: int
    layers: tuple[LayerHealth, ...]
    root_cause: RootCause | None
    findings: tuple[Finding, ...]  # of the places outside the network (loss, optimizer, input)
    checked: tuple[str, ...]  # what was looked at: the answer when nothing explains the run
    run: dict[str, Any]
    fixes: list[dict[str, Any]] = field(default_factory=list)  # filled by gradsight.fixes (fixes read a diagnosis)

    def as_json(self) -> dict[str, Any]:
        cause = self.root_cause
        return {
            "schema": SCHEMA,
            "anomaly": self.anomaly,
            "health": self.health,
            "layers": [{"module": x.module, "type": x.type, "health": x.health,
                        "issues": [{"kind": i.kind, "severity": i.severity, "evidence": i.evidence} for i in x.issues],
                        "source": {"file": x.source[0], "line": x.source[1]} if x.source else None} for x in self.layers],
            "root_cause": None if cause is None else {
                "module": cause.module, "kind": cause.kind, "confidence": cause.confidence, "path": cause.path,
            },
            "fixes": self.fixes,
            # beyond the contract: what the terminal summary, reports and editor show
            "evidence": None if cause is None else cause.evidence,
            "calibration": None if cause is None or cause.score is None else {"tier": cause.tier, "score": cause.score},
            "checked": list(self.checked),
            "findings": [{"module": f.module, "kind": f.kind, "severity": f.severity, "evidence": f.evidence, "step": f.step}
                         for f in self.findings],
            "run": self.run,
        }


def build(data: RunData, findings: list[Finding], cause: RootCause | None) -> dict[str, Any]:
    """The diagnosis as the JSON contract (for the CLI, the reports and the server)."""
    return assemble(data, findings, cause).as_json()


def assemble(data: RunData, findings: list[Finding], cause: RootCause | None) -> Diagnosis:
    by_module: dict[str, list[Finding]] = {}
    for f in findings:
        by_module.setdefault(f.module, []).append(f)
    layers = []
    scores = []
    own = set(data.own_layers())
    for m in data.modules:
        issues = by_module.get(m.name, [])
        score = health_of(issues)
        if m.id in own:
            scores.append(score)
        layers.append(LayerHealth(m.name, m.type, score, tuple(Issue(f.kind, f.severity, f.evidence) for f in issues),
                                  (m.file, int(m.line)) if m.file and m.line else None))
    outside = [f for f in findings if f.module in OUTSIDE]
    model = (0.5 * min(scores) + 0.5 * float(np.mean(scores))) if scores else 100.0
    model -= sum(penalty(f) for f in outside if f.severity != "info")
    # an error on the model itself or on a block of layers (a list of layers it does not hold, a NaN its own code
    # made) is the model's too, though no layer carries it
    model -= sum(penalty(f) for f in findings if f.severity == "error" and f.module in data.index and data.index[f.module] not in own)
    reported = {f.kind for f in findings}
    run = {"path": data.path, "script": data.run.get("script"), "steps": data.n_steps, "status": data.run.get("status"),
           "model": data.run.get("model"), "optimizer": data.run.get("optimizer"), "phase": data.phase,
           # what the runtime warned of (its own cost, a watch it could not parse, ...), unless a finding says it
           "warnings": [{"step": e.step, "name": e.name, "message": e.message} for e in data.events
                        if e.kind == "warning" and e.name not in reported and e.name != NEVER_STEPPED]}
    return Diagnosis(_anomaly(data, cause), int(round(float(np.clip(model, 0, 100)))), tuple(layers), cause, tuple(outside),
                     checked(data, findings), run)


def checked(data: RunData, findings: list[Finding]) -> tuple[str, ...]:
    """What the diagnosis looked at and found normal, in words: said when no root cause is found."""
    steps = data.steps
    lr = steps["lr"][np.isfinite(steps["lr"])]
    loss = steps["loss"][np.isfinite(steps["loss"])]
    layers = data.own_layers()
    flagged = {f.kind for f in findings if f.severity == "error"}
    out = [f"{data.n_steps} optimizer steps, {len(layers)} layers"]
    if len(loss):
        out.append(f"loss {loss[0]:.3g} -> {loss[-1]:.3g}, no spike or divergence caught")
    if len(lr):
        out.append(f"learning rate {lr.min():.3g}..{lr.max():.3g}, its update ratios and the optimizer's settings (eps, weight decay, clipping)")
    got = sum(1 for p in data.params if p.get("got_grad")) if data.params else 0
    out.append(f"gradient reach: {got} of {len(data.params)} parameter tensors got a gradient and are in the optimizer"
               if data.params else "gradient reach")
    out.append("per-layer gradients, activations, dead and saturated units, non-finite values")
    if data.observed("loss"):
        out.append("the loss's inputs and targets (ranges, shapes, dtypes)")
    if data.observed("attention"):
        out.append("attention entropy and masks")
    if data.observed("dropout"):
        out.append("dropout rates")
    if flagged:
        out.append("errors found but none explains the run: " + ", ".join(sorted(flagged)))
    return tuple(out)


def _anomaly(data: RunData, cause: RootCause | None) -> dict[str, Any] | None:
    triggered = [e for e in data.events if e.kind in ("trigger", "breakpoint") and e.step is not None]
    if triggered:
        e = min(triggered, key=lambda e: (e.step, e.id))
        step, trigger = int(e.step), e.name  # type: ignore[arg-type]
        extra: dict[str, Any] = {"module": e.module, "value": e.value, "message": e.message}
    elif cause is not None and cause.step is not None:
        step, trigger, extra = cause.step, cause.kind, {"module": cause.module}
    else:
        return None
    steps = data.steps
    k = int(np.searchsorted(steps["step"], step))
    metrics: dict[str, Any] = dict(extra)
    if k < len(steps["step"]) and steps["step"][k] == step:
        for key in ("loss", "grad_norm", "lr"):
            v = float(steps[key][k])
            metrics[key] = v if np.isfinite(v) else None
    return {"step": step, "trigger": trigger, "metrics": metrics}
