"""The diagnosis of a run: health per module and for the model, the anomaly, the root cause (fixes are chosen by
``gradsight.fixes``, which reads this).

Health (0-100). A module starts at 100 and loses, for each issue found on it,
``35 + 45 s`` for an error, ``10 + 20 s`` for a warning and ``2 + 3 s`` for an
info, where ``s`` is the issue's strength (0-1); the result is clamped to 0-100.
The model's health is the mean of the worst layer's and the average layer's
scores, less the same penalties for issues outside the layers (the loss, the
optimizer, the input), clamped to 0-100.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import kinds
from .. import thresholds as th
from . import attention, lossfit, optimizer, reach
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
    curve, loss_findings = analyse(data, t)
    findings = Detector(data, t, curve).run() + loss_findings
    trouble = curve.spike_step is not None or curve.diverging or any(f.kind == kinds.NAN_INF for f in findings)
    findings += reach.detect(data)
    findings += optimizer.detect(data, t, curve)
    findings += lossfit.detect(data, t, curve, trouble) + lossfit.dropout(data, t, curve)
    findings += attention.detect(data, t, curve)
    findings = merge(findings)
    return findings, find(data, findings, curve, t)


def diagnose(path: str | os.PathLike[str], thresholds: th.Thresholds | None = None, script: str | None = None) -> dict[str, Any]:
    data = load(os.fspath(path))
    t = thresholds or thresholds_for(data)
    findings, cause = analyse_run(data, t)
    return build(data, findings, cause, script)


def thresholds_for(data: RunData) -> th.Thresholds:
    where = data.run.get("cwd") or os.getcwd()
    try:
        return th.load(where if os.path.isdir(where) else os.getcwd())
    except th.ThresholdError:
        return th.Thresholds()


def build(data: RunData, findings: list[Finding], cause: RootCause | None, script: str | None = None) -> dict[str, Any]:
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
        layers.append({
            "module": m.name,
            "type": m.type,
            "health": score,
            "issues": [{"kind": f.kind, "severity": f.severity, "evidence": f.evidence} for f in issues],
            "source": {"file": m.file, "line": m.line} if m.file and m.line else None,
        })
    outside = [f for f in findings if f.module in OUTSIDE]
    model = (0.5 * min(scores) + 0.5 * float(np.mean(scores))) if scores else 100.0
    model -= sum(penalty(f) for f in outside if f.severity != "info")
    anomaly = _anomaly(data, cause)
    reported = {f.kind for f in findings}
    return {
        "schema": SCHEMA,
        "anomaly": anomaly,
        "health": int(round(float(np.clip(model, 0, 100)))),
        "layers": layers,
        "root_cause": None if cause is None else {
            "module": cause.module, "kind": cause.kind, "confidence": cause.confidence, "path": cause.path,
        },
        "fixes": [],  # filled by gradsight.fixes.attach (fixes read a diagnosis; the analysis does not know them)
        # beyond the contract: what the terminal summary, reports and editor show
        "evidence": None if cause is None else cause.evidence,
        "findings": [{"module": f.module, "kind": f.kind, "severity": f.severity, "evidence": f.evidence, "step": f.step}
                     for f in findings if f.module in OUTSIDE],
        "run": {"path": data.path, "script": data.run.get("script"), "steps": data.n_steps, "status": data.run.get("status"),
                "model": data.run.get("model"), "optimizer": data.run.get("optimizer"),
                # what the runtime warned of (its own cost, a watch it could not parse, ...), unless a finding says it
                "warnings": [{"step": e.step, "name": e.name, "message": e.message} for e in data.events
                             if e.kind == "warning" and e.name not in reported]},
    }


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
