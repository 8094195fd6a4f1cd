"""The server's commands as plain functions: tensor-breakpoint conditions and pictures."""

from __future__ import annotations

import ast
import base64
import fnmatch
import json
import re
from typing import Any

from ..conditions import ConditionError, parse
from ..conditions.parser import LAYER_METRICS
from .render import anomaly_name
from .runs import RunView

PICTURES = ("heatmap", "gradient_flow", "histogram", "attention", "projection", "loss_curve")
SANDBOX = ("histogram", "attention", "projection", "samples")
_LAYER_LINE = re.compile(r"^\s*self\.(\w+)\s*(?::[^=]+)?=")


class CommandError(ValueError):
    """Bad arguments to a command: the message says which and why."""


def instances_glob(modules: list[str], all_modules: list[str]) -> str | None:
    """One glob that matches exactly ``modules`` (indices that differ become ``*``), or None."""
    if not modules:
        return None
    if len(modules) == 1:
        return modules[0]
    split = [m.split(".") for m in modules]
    if len({len(p) for p in split}) != 1:
        return None
    parts = []
    for column in zip(*split):
        parts.append(column[0] if len(set(column)) == 1 else "*")
    glob = ".".join(parts)
    matched = {m for m in all_modules if fnmatch.fnmatchcase(m, glob) and m.count(".") == glob.count(".")}
    return glob if matched == set(modules) else None


def scoped(condition: str, glob: str) -> str:
    """``grad_norm > 50`` scoped to ``glob``: ``layer("glob").grad_norm > 50`` (metrics already scoped stay)."""
    tree = ast.parse(condition.strip(), mode="eval")
    lines = condition.strip().splitlines() or [""]
    offsets = [0]
    for ln in lines[:-1]:
        offsets.append(offsets[-1] + len(ln) + 1)
    spots = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in LAYER_METRICS:
            spots.append(offsets[node.lineno - 1] + node.col_offset)
    text = condition.strip()
    for pos in sorted(spots, reverse=True):
        text = text[:pos] + f"layer({json.dumps(glob)})." + text[pos:]
    return text


def layer_attr(line_text: str) -> str | None:
    """``query`` for a line ``self.query = nn.Linear(...)``."""
    m = _LAYER_LINE.match(line_text)
    return m.group(1) if m else None


def validate(condition: str, *, modules_on_line: list[str], all_modules: list[str], line_text: str = "") -> dict[str, Any]:
    """What a tensor breakpoint on a line becomes.

    - a layer line (one that creates modules): a watch scoped to its instances, as a ``--break``
      condition (``layer("glob").metric``) and as a watch for a live run;
    - any other line: a debugpy conditional breakpoint calling ``gradsight.check``.
    A bad condition gives ``{"ok": false, "message", "column"}`` (column 1-based).
    """
    try:
        cond = parse(condition)
    except ConditionError as exc:
        return {"ok": False, "message": exc.message, "column": exc.column, "expression": exc.expression, "error": exc.render()}
    text = cond.text
    uses_layer = cond.uses_layer_metrics
    if modules_on_line or (uses_layer and layer_attr(line_text)):
        glob = instances_glob(modules_on_line, all_modules)
        if glob is None:
            attr = layer_attr(line_text)
            # no run (yet) to name the instances: every module stored under that attribute
            glob = f"*{attr}" if attr and not modules_on_line else None
        if glob is not None:
            full = scoped(text, glob) if uses_layer else text
            return {"ok": True, "kind": "layer", "condition": text, "scope": glob, "modules": modules_on_line,
                    "breakCondition": full, "debugCondition": None,
                    "label": f"{text}  [{glob}]"}
        # instances that no single glob names: one scoped watch each
        conds = [scoped(text, m) for m in modules_on_line]
        return {"ok": True, "kind": "layer", "condition": text, "scope": None, "modules": modules_on_line,
                "breakCondition": " or ".join(f"({c})" for c in conds), "debugCondition": None, "label": text}
    return {"ok": True, "kind": "loop", "condition": text, "scope": None, "modules": [], "breakCondition": text,
            "debugCondition": f"__import__('gradsight').check({json.dumps(text)})", "label": text}


def picture(view: RunView, args: dict[str, Any]) -> dict[str, Any]:
    """Render one picture of the run as PNG or SVG bytes (base64) with what a panel needs around it."""
    from ..viz import pictures  # matplotlib: imported on first use, keeps the server's start fast

    kind = str(args.get("kind", "heatmap"))
    fmt = str(args.get("format", "png"))
    if kind not in PICTURES:
        raise CommandError(f"unknown picture {kind!r}: choose one of {', '.join(PICTURES)}")
    if fmt not in ("png", "svg"):
        raise CommandError(f"unknown format {fmt!r}: png or svg")
    data = view.data
    if data is None:
        raise CommandError(view.error or f"{view.path}: no data")
    d = view.diagnosis or {}
    anomaly = (d.get("anomaly") or {}).get("step")
    try:
        if kind == "heatmap":
            between = args.get("steps")
            rng = (int(between[0]), int(between[1])) if isinstance(between, (list, tuple)) and len(between) == 2 else None
            body = pictures.heatmap(data, anomaly_step=anomaly, fmt=fmt, steps_between=rng, modules=args.get("modules") or None)
        elif kind == "gradient_flow":
            step = args.get("step", anomaly if anomaly is not None else view.last_step)
            if step is None:
                raise CommandError("gradient_flow needs a step: the run has none yet")
            body = pictures.gradient_flow(data, int(step), fmt=fmt)
        elif kind == "loss_curve":
            body = pictures.loss_curve(data, anomaly, fmt=fmt)
        else:
            if "tensor" not in args:
                raise CommandError(f"{kind} needs a captured tensor id (see 'tensors' in the heatmap's answer)")
            tid = int(args["tensor"])
            if kind == "histogram":
                body = pictures.histogram(view.path, tid, fmt=fmt)
            elif kind == "attention":
                body = pictures.attention(view.path, tid, sample=int(args.get("sample", 0)), head=int(args.get("head", 0)), fmt=fmt)
            else:
                body = pictures.projection(view.path, tid, method=str(args.get("method", "pca")), fmt=fmt)
    except pictures.PictureError as exc:
        raise CommandError(str(exc)) from exc
    from ..store import RunStore

    with RunStore(view.path) as store:
        tensors = [{"id": t.id, "step": t.step, "module": t.module, "role": t.role, "shape": list(t.shape)} for t in store.tensors()]
    steps = data.steps["step"]
    return {
        "kind": kind, "mime": "image/svg+xml" if fmt == "svg" else "image/png", "data": base64.b64encode(body).decode("ascii"),
        "run": view.path, "steps": [int(steps[0]), int(steps[-1])] if len(steps) else None, "anomaly": anomaly,
        "modules": [{"module": m.name, "type": m.type, "file": m.file, "line": m.line} for m in data.modules if m.own_params > 0],
        "tensors": tensors,
    }


def _int(args: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise CommandError(f"{key} must be a whole number, got {value!r}")
    return int(value)


def run_info(view: RunView) -> dict[str, Any]:
    """Which run a panel shows: its file, script, status, step, health and anomaly."""
    import os

    data = view.data
    run = data.run if data is not None else {}
    d = view.diagnosis or {}
    a = d.get("anomaly") or None
    return {"path": view.path, "name": os.path.basename(view.path), "script": run.get("script"), "status": view.status,
            "started": run.get("started"), "step": view.last_step, "model": run.get("model"), "health": d.get("health"),
            "anomaly": None if not a else {"step": a.get("step"), "trigger": a.get("trigger"), "title": anomaly_name(view, a)},
            "rootCause": d.get("root_cause"), "error": view.error}


def panel_data(view: RunView, args: dict[str, Any]) -> dict[str, Any]:
    """What the panel draws for the gradients view: the run, the heatmap matrix, the flow, loss and global norm, and the
    captured tensors the sandbox views can open."""
    from ..viz import panels

    data = view.data
    if data is None:
        raise CommandError(view.error or f"{view.path}: no data")
    between = args.get("steps")
    rng = None
    if isinstance(between, (list, tuple)) and len(between) == 2 and all(isinstance(x, (int, float)) for x in between):
        rng = (int(between[0]), int(between[1]))
    modules = args.get("modules")
    anomaly = ((view.diagnosis or {}).get("anomaly") or {}).get("step")
    try:
        grads = panels.gradients(data, health=view.layers, anomaly=anomaly, steps_between=rng,
                                 modules=modules if isinstance(modules, str) and modules else None,
                                 step=_int(args, "step"), max_columns=_int(args, "maxColumns", 600) or 600)
        tensors = panels.tensor_list(view.path, data)
    except panels.PanelError as exc:
        raise CommandError(str(exc)) from exc
    return {"run": run_info(view), "gradients": grads, "tensors": tensors}


def sandbox(view: RunView, args: dict[str, Any]) -> dict[str, Any]:
    """One sandbox view's data from the captured tensors: histogram, attention, projection or samples."""
    from ..viz import panels

    kind = str(args.get("view", ""))
    if kind not in SANDBOX:
        raise CommandError(f"unknown view {kind!r}: choose one of {', '.join(SANDBOX)}")
    data = view.data
    if data is None:
        raise CommandError(view.error or f"{view.path}: no data")
    anomaly = ((view.diagnosis or {}).get("anomaly") or {}).get("step")
    try:
        tensors = panels.tensor_list(view.path, data)
        if kind == "samples":
            body = panels.samples(view.path, data, _int(args, "step"))
        else:
            tid = _int(args, "tensor")
            if tid is None:
                tid = _default_tensor(kind, tensors, args.get("module"), anomaly)
            if kind == "histogram":
                body = panels.histogram(view.path, tid, anomaly=anomaly, compare=_int(args, "compare"))
            elif kind == "attention":
                body = panels.attention(view.path, tid, sample=_int(args, "sample", 0) or 0, head=_int(args, "head", 0) or 0)
            else:
                body = panels.projection(view.path, tid, method=str(args.get("method", "pca")), color=str(args.get("color", "auto")))
    except panels.PanelError as exc:
        raise CommandError(str(exc)) from exc
    return {"view": kind, "run": run_info(view), "tensors": tensors, "data": body}


def _default_tensor(kind: str, tensors: list[dict[str, Any]], module: Any, anomaly: int | None) -> int:
    """The tensor a view opens on by itself: the module's (when one is asked for), at the anomaly step when there is one."""
    if kind == "attention":
        pool = [t for t in tensors if t["attention"]]
    elif kind == "projection":  # an embedding table first (its rows are the tokens), then activations
        emb = [t for t in tensors if t["role"] == "weight" and t.get("type") in ("Embedding", "EmbeddingBag") and len(t["shape"]) == 2]
        pool = emb + [t for t in tensors if t["role"] == "activation" and len(t["shape"]) >= 2]
    else:
        pool = [t for t in tensors if t["role"] == "activation"] or [t for t in tensors if t["role"] in ("gradient", "weight")]
    if isinstance(module, str):
        pool = [t for t in pool if t["module"] == module] or pool
    if not pool:
        what = {"attention": "attention maps (an attention model's softmax, or the attention role)",
                "projection": "tensors with rows to project", "histogram": "tensors"}[kind]
        raise CommandError(f"this run captured no {what}: tensors are captured at an anomaly")
    # the anomaly's own step, else the first captured after it (activations come from the next forward pass)
    after = sorted((t for t in pool if anomaly is not None and t["step"] >= anomaly), key=lambda t: (t["step"], t["id"]))
    return int((after or pool)[0]["id"])


def export_report(view: RunView, path: str) -> dict[str, Any]:
    """The whole panel as the report: a PDF (or HTML) of the diagnosis with every figure, written to ``path``."""
    from pathlib import Path

    from ..viz.report import html_report, pdf_report

    if view.data is None or view.diagnosis is None:
        raise CommandError(view.error or f"{view.path}: no data")
    if path.lower().endswith(".pdf"):
        pdf_report(view.data, view.diagnosis, path)
    elif path.lower().endswith((".html", ".htm")):
        Path(path).write_text(html_report(view.data, view.diagnosis), encoding="utf-8")
    else:
        raise CommandError(f"a report is .pdf or .html, got {path!r}")
    return {"path": path, "bytes": Path(path).stat().st_size}
