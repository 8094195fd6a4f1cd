"""What the editor shows, as plain data and Markdown (no LSP types here, so it is testable alone)."""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis.summary import anomaly_detail
from ..kinds import PLACES, label
from ..script import Script
from .edits import DID_NOT_HELP, VALIDATED, Placed
from .runs import RunView

BARS = "▁▂▃▄▅▆▇█"
SEVERITY_RANK = {"ok": 0, "info": 1, "warning": 2, "error": 3}
LOOP_CALLS = re.compile(r"\.(backward|step|zero_grad)\s*\(|clip_grad_norm_\s*\(")
ROOT = ""  # the model's own module name


@dataclass(frozen=True)
class LineLayers:
    """The layers (module instances) one source line creates.

    ``groups`` splits them by creating call (or class attribute): the modules of one group are
    instances of one thing (``self.query`` of twelve layers); several groups are different layers
    that share a line (``nn.Sequential(nn.Linear(2, 3), nn.ReLU())`` on one line)."""

    line: int  # 1-based
    modules: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...] = ()

    @property
    def is_model(self) -> bool:
        return ROOT in self.modules

    def layers(self) -> tuple[str, ...]:
        return tuple(m for m in self.modules if m != ROOT)

    def group_of(self, module: str) -> tuple[str, ...]:
        return next((g for g in self.groups if module in g), (module,))


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


def display(view: RunView, module: str) -> str:
    """The readable name of a module (``model[2]``), as the run recorded it, else its ``named_modules()`` name."""
    data = view.data
    if data is not None and module in data.index:
        info = data.modules[data.index[module]]
        if info.label:
            return info.label
    return module or "(model)"


def named(view: RunView, module: str) -> str:
    """``model[2]`` and, when it differs, the name gradsight's conditions and CLI use (``2``)."""
    shown = display(view, module)
    return f"`{shown}`" if shown == module or not module else f"`{shown}` (`{module}`)"


def severity(layer: dict[str, Any]) -> str:
    return max((i["severity"] for i in layer["issues"]), key=lambda s: SEVERITY_RANK[s], default="ok")


def worst(view: RunView, modules: tuple[str, ...]) -> dict[str, Any] | None:
    layers = [view.layers[m] for m in modules if m in view.layers]
    return min(layers, key=lambda x: (x["health"], -SEVERITY_RANK[severity(x)]), default=None)


def summary(view: RunView, entry: LineLayers) -> str:
    """``health 34 · exploding · 3 of 12 instances``: one line for a decoration; on the model's line, the model's health."""
    if entry.is_model:
        return model_summary(view)
    layer = worst(view, entry.layers())
    if layer is None:
        return ""
    parts = [f"health {layer['health']}"]
    issues = sorted(layer["issues"], key=lambda i: -SEVERITY_RANK[i["severity"]])
    if issues:
        parts.append(", ".join(dict.fromkeys(label(i["kind"]) for i in issues if i["severity"] != "info")) or label(issues[0]["kind"]))
    groups = [g for g in entry.groups if any(m in view.layers for m in g)] or [entry.layers()]
    if len(groups) > 1:
        parts.append(f"{len(groups)} layers, worst {display(view, layer['module'])}")
    group = entry.group_of(layer["module"]) if len(groups) > 1 else groups[0]
    if len(group) > 1:
        bad = sum(1 for m in group if m in view.layers and view.layers[m]["issues"])
        parts.append(f"{bad} of {len(group)} instances" if bad else f"{len(group)} instances")
    return " · ".join(parts)


def anomaly_name(view: RunView, a: dict[str, Any]) -> str:
    """What caught the anomaly, in words: a trigger's label, or ``breakpoint grad_norm > 50`` for a tensor breakpoint."""
    ev = next((e for e in view.events() if e.step == a.get("step") and e.name == a.get("trigger") and e.kind == "breakpoint"), None)
    if ev is not None:
        return f"breakpoint {ev.condition}" if ev.condition else "breakpoint"
    return label(str(a.get("trigger", "")))


def model_summary(view: RunView) -> str:
    """``model health 12 · loss_spike at step 79 · root cause model[0] exploding``."""
    d = view.diagnosis or {}
    parts = [f"model health {d.get('health', '-')}"]
    a = d.get("anomaly")
    if a:
        parts.append(f"{anomaly_name(view, a)} at step {a['step']}")
    rc = d.get("root_cause")
    if rc:
        parts.append(f"root cause {display(view, rc['module'])} {label(rc['kind'])}")
    return " · ".join(parts)


def model_severity(view: RunView) -> str:
    d = view.diagnosis or {}
    health = d.get("health")
    if d.get("root_cause") or (isinstance(health, int) and health < 50):
        return "error"
    if d.get("anomaly") or (isinstance(health, int) and health < 80):
        return "warning"
    return "ok"


def command_link(title: str, command: str, args: list[Any]) -> str:
    return f"[{title}](command:{command}?{urllib.parse.quote(json.dumps(args))})"


def fix_lines(placed: list[Placed], details: dict[str, dict[str, Any]], limit: int = 3) -> list[str]:
    """A hover's fixes, best first: each with what a re-run measured (validated: its effect) or what it is expected
    to do, and a link that applies it."""
    out = ["**Fixes**" + (" (best first)" if len(placed) > 1 else "")]
    for p in placed[:limit]:
        fix = details.get(p.fix_id) or {}
        link = command_link("Apply", "gradsight.applyFix", [{"id": p.fix_id}])
        if p.verdict == VALIDATED:
            said = "; ".join(x for x in (p.effect, p.summary) if x) or "the re-run no longer shows the fault"
            out.append(f"- **{p.title}** · validated: {_one_line(said)} · {link}")
        elif p.verdict == DID_NOT_HELP:
            out.append(f"- {p.title} · did not help" + (f": {_one_line(p.summary)}" if p.summary else "") + f" · {link}")
        else:
            effect = fix.get("effect") if isinstance(fix.get("effect"), str) and fix.get("effect") else None
            out.append(f"- **{p.title}**" + (f" · expected: {_one_line(effect)}" if effect else "") + " (not validated yet)"
                       + f" · {link}")
    if len(placed) > limit:
        out.append(f"- … {len(placed) - limit} more in the light bulb")
    return out


def _one_line(text: str) -> str:
    return " ".join(text.split())


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


def links(view: RunView, module: str | None) -> str:
    """The hover's way into the panel: the heatmap at this layer, and the sandbox views its captured tensors allow."""
    arg: dict[str, Any] = {"run": view.path}
    if module:
        arg["module"] = module
    out = [command_link("Open heatmap", "gradsight.showHeatmap", [arg])]
    roles = {t.role for t in view.tensors if module is None or t.module == module}
    if "attention" in roles:
        out.append(command_link("Attention maps", "gradsight.showSandbox", [{**arg, "view": "attention"}]))
    if roles & {"activation", "gradient", "weight"} or (module is None and view.tensors):
        out.append(command_link("Activations", "gradsight.showSandbox", [{**arg, "view": "histogram"}]))
    if module is None and view.tensors:
        out.append(command_link("Projection", "gradsight.showSandbox", [{**arg, "view": "projection"}]))
    return " · ".join(out)


def _issue_lines(layer: dict[str, Any]) -> list[str]:
    out = [f"- **{label(issue['kind'])}** ({issue['severity']}): {issue['evidence']}" for issue in layer["issues"]]
    return out or ["- no issue found"]


def layer_hover(view: RunView, entry: LineLayers) -> str | None:
    if entry.is_model:
        return model_hover(view, entry)
    layer = worst(view, entry.layers())
    if layer is None:
        return None
    groups = [g for g in entry.groups if any(m in view.layers for m in g)] or [entry.layers()]
    group = entry.group_of(layer["module"]) if len(groups) > 1 else groups[0]
    head = f"**gradsight** · {named(view, layer['module'])} ({layer['type']}) · health **{layer['health']}**/100"
    if len(group) > 1:
        head += f" (worst of {len(group)} instances)"
    if len(groups) > 1:
        head += f" (worst of {len(groups)} layers on this line)"
    out = [head, "", *_issue_lines(layer)]
    out += ["", _series_line("grad norm", *view.series("grad_norm", layer["module"]))]
    rc = (view.diagnosis or {}).get("root_cause")
    if rc and (rc["module"] in entry.modules or any(p in entry.modules for p in rc["path"])):
        role = "starts here" if rc["module"] in entry.modules else "passes through here"
        out += ["", f"**Root cause** {role}: `{display(view, rc['module'])}` {label(rc['kind'])} (confidence {rc['confidence']:.2f})"
                f" · path {' → '.join(display(view, p) for p in rc['path'])}"]
        if view.diagnosis and view.diagnosis.get("evidence"):
            out.append(f"evidence: {view.diagnosis['evidence']}")
    if len(groups) > 1:  # different layers that share the line
        out += ["", "| layer | type | health | issues |", "|---|---|---|---|"]
        for g in groups:
            x = worst(view, g)
            if x is not None:
                kinds = ", ".join(dict.fromkeys(label(i["kind"]) for i in x["issues"])) or "-"
                many = f" ×{len(g)}" if len(g) > 1 else ""
                out.append(f"| `{display(view, x['module'])}`{many} | {x['type']} | {x['health']} | {kinds} |")
    elif len(group) > 1:
        out += ["", "| instance | health | issues |", "|---|---|---|"]
        ranked = sorted((view.layers[m] for m in group if m in view.layers), key=lambda x: x["health"])
        for x in ranked[:12]:
            kinds = ", ".join(dict.fromkeys(label(i["kind"]) for i in x["issues"])) or "-"
            out.append(f"| `{display(view, x['module'])}` | {x['health']} | {kinds} |")
        if len(ranked) > 12:
            out.append(f"| … {len(ranked) - 12} more | | |")
    out += ["", links(view, layer["module"])]
    return "\n".join(out)


def model_hover(view: RunView, entry: LineLayers) -> str:
    """The model's own line: the model's health (not its root module's own issues), the run, the anomaly, the root cause."""
    d = view.diagnosis or {}
    m = view.data.modules[view.data.index[ROOT]] if view.data is not None and ROOT in view.data.index else None
    kind = f" ({m.type})" if m is not None else ""
    out = [f"**gradsight** · model {named(view, ROOT)}{kind} · model health **{d.get('health', '-')}**/100", ""]
    layers = [x for x in view.layers.values() if x["module"] and x["issues"]]
    worst_layers = sorted(layers, key=lambda x: x["health"])[:5]
    if worst_layers:
        out.append("| layer | health | issues |")
        out.append("|---|---|---|")
        for x in worst_layers:
            kinds = ", ".join(dict.fromkeys(label(i["kind"]) for i in x["issues"]))
            out.append(f"| `{display(view, x['module'])}` | {x['health']} | {kinds} |")
    else:
        out.append("No layer has an issue.")
    own = view.layers.get(ROOT)
    if own and own["issues"]:
        out += ["", *_issue_lines(own)]
    out += ["", *run_lines(view), "", links(view, None)]
    return "\n".join(out)


def loop_kind(text: str) -> str | None:
    m = LOOP_CALLS.search(text)
    if m is None:
        return None
    return m.group(1) or "clip"


def run_lines(view: RunView) -> list[str]:
    """Loss, global gradient norm, learning rate, the anomaly and the root cause of the run."""
    out = [_series_line("loss", *view.series("loss")), "", _series_line("grad norm (global)", *view.series("grad_norm"))]
    steps, lr = view.series("lr")
    if len(lr) and np.isfinite(lr[-1]):
        out += ["", f"learning rate {_fmt(float(lr[-1]))}"]
    d = view.diagnosis or {}
    a = d.get("anomaly")
    out.append("")
    if a:
        detail = anomaly_detail(a)
        out.append(f"**Anomaly**: {anomaly_name(view, a)} at step {a['step']}" + (f" ({detail})" if detail else ""))
    else:
        out.append("No anomaly caught.")
    rc = d.get("root_cause")
    if rc:
        out.append(f"**Root cause**: `{display(view, rc['module'])}` {label(rc['kind'])} (confidence {rc['confidence']:.2f})")
        if d.get("evidence"):
            out.append(f"evidence: {d['evidence']}")
    return out


def loop_hover(view: RunView) -> str | None:
    if view.data is None:
        return f"**gradsight** · {view.error}" if view.error else None
    state = view.state()
    out = [f"**gradsight** · run `{view.path.rsplit('/', 1)[-1]}` · step {state['step']} ({state['status']})"
           f" · model health **{state['health']}**/100", ""]
    out += [*run_lines(view), "", links(view, None)]
    return "\n".join(out)


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
        layer = worst(view, e.layers())
        if layer is None:
            continue
        sev = severity(layer)
        if sev in ("warning", "error"):
            first = next(i for i in layer["issues"] if i["severity"] == sev)
            group = e.group_of(layer["module"])
            where = display(view, layer["module"])
            if len(group) > 1:
                where += f" (worst of {len(group)} instances)"
            elif len(e.groups) > 1:
                where += f" (worst of {len(e.groups)} layers on this line)"
            out.append(Problem(e.line, sev, first["kind"], f"health {layer['health']}: {label(first['kind'])} in {where}: {first['evidence']}",
                               layer["module"]))
        if rc and rc["module"] in e.layers():
            out.append(Problem(e.line, "error", rc["kind"], _cause_message(view, rc), rc["module"]))
    if rc and is_script and rc["module"] in PLACES:
        line = Script(text).place_line(rc["module"])  # the optimizer's, the loss's or the input's line
        if line:
            out.append(Problem(line, "error", rc["kind"], _cause_message(view, rc), rc["module"]))
    return out


def _cause_message(view: RunView, rc: dict[str, Any]) -> str:
    msg = f"root cause of the anomaly: {display(view, rc['module'])} {label(rc['kind'])} (confidence {rc['confidence']:.2f})"
    ev = (view.diagnosis or {}).get("evidence")
    return msg + (f": {ev}" if ev else "")


def health_records(view: RunView, uri: str, entries: list[LineLayers]) -> list[dict[str, Any]]:
    """``gradsight/health`` records: one per layer line (its worst instance; on the model's line, the model); ``line`` is 0-based."""
    out = []
    for e in entries:
        if e.is_model:
            d = view.diagnosis or {}
            out.append({"uri": uri, "line": e.line - 1, "module": ROOT, "label": display(view, ROOT), "health": d.get("health", 100),
                        "severity": model_severity(view), "summary": summary(view, e), "instances": 1, "layers": 1, "model": True,
                        "kinds": [d["root_cause"]["kind"]] if d.get("root_cause") else []})
            continue
        layer = worst(view, e.layers())
        if layer is None:
            continue
        groups = [g for g in e.groups if any(m in view.layers for m in g)] or [e.layers()]
        out.append({"uri": uri, "line": e.line - 1, "module": layer["module"], "label": display(view, layer["module"]),
                    "health": layer["health"], "severity": severity(layer), "summary": summary(view, e),
                    "instances": len(e.group_of(layer["module"])) if len(groups) > 1 else len(groups[0]), "layers": len(groups),
                    "model": False, "kinds": list(dict.fromkeys(i["kind"] for i in layer["issues"]))})
    return out
