"""What the editor shows, as plain data and Markdown (no LSP types here, so it is testable alone)."""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis.summary import anomaly_detail
from ..fixes import script_names
from .runs import RunView

BARS = "▁▂▃▄▅▆▇█"
SEVERITY_RANK = {"ok": 0, "info": 1, "warning": 2, "error": 3}
LABELS = {
    "exploding_gradient": "exploding", "vanishing_gradient": "vanishing", "dead_units": "dead units", "nan_inf": "NaN/Inf",
    "activation_out_of_range": "activations out of range", "saturation": "saturated", "loss_spike": "loss spike",
    "loss_not_decreasing": "loss not decreasing", "oscillating_loss": "loss oscillates", "update_ratio_too_high": "updates too large",
    "update_ratio_too_low": "updates too small", "not_updated": "never updated", "frozen": "frozen",
    "learning_rate_too_high": "learning rate too high", "learning_rate_too_low": "learning rate too low",
    "grads_not_zeroed": "gradients not zeroed", "double_softmax": "softmax twice", "poor_initialization": "poor initialisation",
}
LOOP_CALLS = re.compile(r"\.(backward|step|zero_grad)\s*\(|clip_grad_norm_\s*\(")


@dataclass(frozen=True)
class LineLayers:
    """The layers (module instances) one source line creates."""

    line: int  # 1-based
    modules: tuple[str, ...]


def sparkline(values: np.ndarray, width: int = 32) -> str:
    """Unicode bars of a series (max per bucket when longer than ``width``); ``×`` marks NaN/Inf."""
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return ""
    if len(v) > width:
        edges = np.linspace(0, len(v), width + 1).astype(int)
        chunks = [v[a:b] for a, b in zip(edges[:-1], edges[1:])]
        v = np.array([np.nan if not np.isfinite(c).all() else float(c.max()) for c in chunks])
    finite = v[np.isfinite(v)]
    if not len(finite):
        return "×" * len(v)
    lo, hi = float(finite.min()), float(finite.max())
    if hi > 0 and lo > 0 and hi / lo > 100:  # orders of magnitude: bars on a log scale
        v, lo, hi = np.log10(np.where(v > 0, v, lo)), np.log10(lo), np.log10(hi)
    span = hi - lo or 1.0
    return "".join("×" if not np.isfinite(x) else BARS[int(round((x - lo) / span * (len(BARS) - 1)))] for x in v)


def label(kind: str) -> str:
    return LABELS.get(kind, kind.replace("_", " "))


def severity(layer: dict[str, Any]) -> str:
    return max((i["severity"] for i in layer["issues"]), key=lambda s: SEVERITY_RANK[s], default="ok")


def worst(view: RunView, modules: tuple[str, ...]) -> dict[str, Any] | None:
    layers = [view.layers[m] for m in modules if m in view.layers]
    return min(layers, key=lambda x: (x["health"], -SEVERITY_RANK[severity(x)]), default=None)


def summary(view: RunView, entry: LineLayers) -> str:
    """``health 34 · exploding · 3 of 12 instances``: one line for a decoration."""
    layer = worst(view, entry.modules)
    if layer is None:
        return ""
    parts = [f"health {layer['health']}"]
    issues = sorted(layer["issues"], key=lambda i: -SEVERITY_RANK[i["severity"]])
    if issues:
        parts.append(", ".join(dict.fromkeys(label(i["kind"]) for i in issues if i["severity"] != "info")) or label(issues[0]["kind"]))
    if len(entry.modules) > 1:
        bad = sum(1 for m in entry.modules if m in view.layers and view.layers[m]["issues"])
        parts.append(f"{bad} of {len(entry.modules)} instances" if bad else f"{len(entry.modules)} instances")
    return " · ".join(parts)


def command_link(title: str, command: str, args: list[Any]) -> str:
    return f"[{title}](command:{command}?{urllib.parse.quote(json.dumps(args))})"


def _fmt(x: float | None) -> str:
    if x is None or not np.isfinite(x):
        return "NaN/Inf" if x is not None else "-"
    return f"{x:.4g}"


def _series_line(name: str, steps: np.ndarray, values: np.ndarray) -> str:
    if not len(values):
        return f"{name}: no data yet"
    finite = np.isfinite(values)
    peak = ""
    if finite.any():
        i = int(np.nanargmax(np.where(finite, values, -np.inf)))
        peak = f", max {_fmt(float(values[i]))} at step {int(steps[i])}"
    return f"{name} `{sparkline(values)}` last {_fmt(float(values[-1]))}{peak} (steps {int(steps[0])}-{int(steps[-1])})"


def layer_hover(view: RunView, entry: LineLayers) -> str | None:
    layer = worst(view, entry.modules)
    if layer is None:
        return None
    n = len(entry.modules)
    head = f"**gradsight** · `{layer['module']}` ({layer['type']}) · health **{layer['health']}**/100"
    if n > 1:
        head += f" (worst of {n} instances)"
    out = [head, ""]
    for issue in layer["issues"]:
        out.append(f"- **{label(issue['kind'])}** ({issue['severity']}): {issue['evidence']}")
    if not layer["issues"]:
        out.append("- no issue found")
    out += ["", _series_line("grad norm", *view.series("grad_norm", layer["module"]))]
    rc = (view.diagnosis or {}).get("root_cause")
    if rc and (rc["module"] in entry.modules or any(p in entry.modules for p in rc["path"])):
        role = "starts here" if rc["module"] in entry.modules else "passes through here"
        out += ["", f"**Root cause** {role}: `{rc['module']}` {label(rc['kind'])} (confidence {rc['confidence']:.2f})"
                f" · path {' → '.join(p or '(model)' for p in rc['path'])}"]
        if view.diagnosis and view.diagnosis.get("evidence"):
            out.append(f"evidence: {view.diagnosis['evidence']}")
    if n > 1:
        out += ["", "| instance | health | issues |", "|---|---|---|"]
        ranked = sorted((view.layers[m] for m in entry.modules if m in view.layers), key=lambda x: x["health"])
        for x in ranked[:12]:
            kinds = ", ".join(dict.fromkeys(label(i["kind"]) for i in x["issues"])) or "-"
            out.append(f"| `{x['module']}` | {x['health']} | {kinds} |")
        if len(ranked) > 12:
            out.append(f"| … {len(ranked) - 12} more | | |")
    out += ["", command_link("Open heatmap", "gradsight.showHeatmap", [{"run": view.path, "module": layer["module"]}])]
    return "\n".join(out)


def loop_kind(text: str) -> str | None:
    m = LOOP_CALLS.search(text)
    if m is None:
        return None
    return m.group(1) or "clip"


def loop_hover(view: RunView) -> str | None:
    if view.data is None:
        return f"**gradsight** · {view.error}" if view.error else None
    state = view.state()
    out = [f"**gradsight** · run `{view.path.rsplit('/', 1)[-1]}` · step {state['step']} ({state['status']})"
           f" · model health **{state['health']}**/100", ""]
    out.append(_series_line("loss", *view.series("loss")))
    out.append("")
    out.append(_series_line("grad norm (global)", *view.series("grad_norm")))
    steps, lr = view.series("lr")
    if len(lr) and np.isfinite(lr[-1]):
        out += ["", f"learning rate {_fmt(float(lr[-1]))}"]
    d = view.diagnosis or {}
    a = d.get("anomaly")
    out.append("")
    if a:
        detail = anomaly_detail(a)
        out.append(f"**Anomaly**: {label(a['trigger'])} at step {a['step']}" + (f" ({detail})" if detail else ""))
    else:
        out.append("No anomaly caught.")
    rc = d.get("root_cause")
    if rc:
        out.append(f"**Root cause**: `{rc['module']}` {label(rc['kind'])} (confidence {rc['confidence']:.2f})")
        if d.get("evidence"):
            out.append(f"evidence: {d['evidence']}")
    out += ["", command_link("Open heatmap", "gradsight.showHeatmap", [{"run": view.path}])]
    return "\n".join(out)


def outside_line(module: str, text: str) -> int | None:
    """The script line a fault of the optimizer, the loss or the input belongs on (1-based)."""
    names = script_names(text)
    lines = names.lines or {}
    if module == "optimizer":
        return lines["optimizer"] - 1 if "optimizer" in lines else lines.get("before_step")
    if module == "loss":
        return lines.get("loss") or lines.get("before_backward")
    if module == "input":
        return lines.get("data")
    return None


@dataclass(frozen=True)
class Problem:
    """A diagnostic before it becomes an LSP one."""

    line: int  # 1-based
    severity: str  # error | warning | info
    code: str
    message: str
    module: str


def problems(view: RunView, entries: list[LineLayers], text: str, is_script: bool) -> list[Problem]:
    out: list[Problem] = []
    rc = (view.diagnosis or {}).get("root_cause")
    for e in entries:
        layer = worst(view, e.modules)
        if layer is None:
            continue
        sev = severity(layer)
        if sev in ("warning", "error"):
            first = next(i for i in layer["issues"] if i["severity"] == sev)
            where = f"{layer['module']}" + (f" (worst of {len(e.modules)})" if len(e.modules) > 1 else "")
            out.append(Problem(e.line, sev, first["kind"], f"health {layer['health']}: {label(first['kind'])} in {where}: {first['evidence']}",
                               layer["module"]))
        if rc and rc["module"] in e.modules:
            out.append(Problem(e.line, "error", rc["kind"], _cause_message(view, rc), rc["module"]))
    if rc and is_script and rc["module"] in ("optimizer", "loss", "input"):
        line = outside_line(rc["module"], text)
        if line:
            out.append(Problem(line, "error", rc["kind"], _cause_message(view, rc), rc["module"]))
    return out


def _cause_message(view: RunView, rc: dict[str, Any]) -> str:
    msg = f"root cause of the anomaly: {rc['module']} {label(rc['kind'])} (confidence {rc['confidence']:.2f})"
    ev = (view.diagnosis or {}).get("evidence")
    return msg + (f": {ev}" if ev else "")


def health_records(view: RunView, uri: str, entries: list[LineLayers]) -> list[dict[str, Any]]:
    """``gradsight/health`` records: one per layer line (its worst instance); ``line`` is 0-based like LSP."""
    out = []
    for e in entries:
        layer = worst(view, e.modules)
        if layer is None:
            continue
        out.append({"uri": uri, "line": e.line - 1, "module": layer["module"], "health": layer["health"], "severity": severity(layer),
                    "summary": summary(view, e), "instances": len(e.modules),
                    "kinds": list(dict.fromkeys(i["kind"] for i in layer["issues"]))})
    return out
