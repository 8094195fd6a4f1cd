"""The terminal summary of a diagnosis."""

from __future__ import annotations

from typing import Any


def anomaly_detail(a: dict[str, Any]) -> str:
    """The anomaly's numbers: ``loss 8.196e+06, grad_norm 2.498e+07``."""
    return ", ".join(f"{k} {v:.4g}" for k, v in a.get("metrics", {}).items() if isinstance(v, float))


def headline(d: dict[str, Any]) -> list[str]:
    """Health, anomaly and root cause: the lines every view of a diagnosis starts with."""
    run = d.get("run", {})
    what = ", ".join(str(v) for v in (run.get("model"), run.get("optimizer")) if v)
    lines = [f"gradsight diagnosis of {run.get('path')} ({run.get('steps')} steps{', ' + what if what else ''})"]
    phase = run.get("phase")
    if phase:
        lines.append(f"note: the script trained {phase['phases']} models one after another; this is the last phase "
                     f"({', '.join(phase['models'])}, from step {phase['from_step']})")
    if run.get("status") == "running":
        lines.append("note: the run is still being written (or its process died without closing it): this diagnosis covers "
                     "the steps committed so far")
    for w in run.get("warnings", []):
        lines.append(f"note: at step {w['step']} the run warned ({w['name']}): {w['message']}")
    lines.append(f"model health: {d['health']}/100")
    a = d.get("anomaly")
    if a:
        detail = anomaly_detail(a)
        lines.append(f"anomaly: {a['trigger']} at step {a['step']}" + (f" ({detail})" if detail else ""))
    else:
        lines.append("anomaly: none caught")
    rc = d.get("root_cause")
    if d.get("ranks"):
        lines.append(f"ranks: {len(d['ranks'])} (" + ", ".join(f"rank {r['rank']}: {r['steps']} steps, {r['status']}" for r in d["ranks"]) + ")")
        lines.extend(f"  rank {n['rank']}: {n['message']}" for n in d.get("rank_findings", []))
    if rc:
        where = f" on rank {rc['rank']}" if "rank" in rc else ""
        lines.append(f"root cause: {rc['module'] or '(model)'} - {rc['kind']}{where} (confidence {rc['confidence']:.2f})")
        if d.get("evidence"):
            lines.append(f"  evidence: {d['evidence']}")
        if len(rc["path"]) > 1:
            lines.append("  path: " + " -> ".join(p or "(model)" for p in rc["path"]))
    else:
        lines.append("root cause: none found; what was checked:")
        lines += [f"  - {c}" for c in d.get("checked") or []]
    return lines


def text(d: dict[str, Any], top: int = 5) -> str:
    lines = headline(d)
    worst = sorted([x for x in d["layers"] if x["issues"]], key=lambda x: x["health"])[:top]
    if worst:
        lines.append("worst layers:")
        for layer in worst:
            src = layer.get("source")
            where = f"  [{str(src['file']).rsplit('/', 1)[-1]}:{src['line']}]" if src else ""
            kinds = ", ".join(sorted({i["kind"] for i in layer["issues"]}))
            lines.append(f"  {layer['health']:>3}  {layer['module'] or '(model)'} ({layer['type']}): {kinds}{where}")
    for f in d.get("findings", []):
        if f["severity"] != "info":
            lines.append(f"  {f['severity']}: {f['module']} {f['kind']} - {f['evidence']}")
    if d.get("fixes"):
        lines.append("fixes:")
        for i, f in enumerate(d["fixes"][:3], 1):
            where = f.get("where")
            loc = f" at {where['file']}:{where['line']}" if where else ""
            v = f.get("validated") or {}
            lines.append(f"  {i}. {f['title']}{loc}" + (f"  [{v['summary']}]" if v.get("summary") else ""))
            lines.extend("       " + ln for ln in f["snippet"].splitlines()[:4])
    return "\n".join(lines)
