"""Reports of a diagnosis: one self-contained HTML file (images inline) or a multi-page PDF."""

from __future__ import annotations

import base64
import html
import io
import textwrap
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

from ..analysis.data import RunData  # noqa: E402
from ..analysis.summary import headline  # noqa: E402
from ..store import RunStore  # noqa: E402
from . import pictures  # noqa: E402


@dataclass
class Figure:
    title: str
    png: bytes


def figures(data: RunData, diagnosis: dict[str, Any]) -> list[Figure]:
    """The pictures a report shows, each traceable to rows of the store."""
    anomaly = diagnosis.get("anomaly") or {}
    step = anomaly.get("step")
    capture = None
    if step is not None:
        cap = [e.data.get("capture_until") for e in data.events if e.kind == "trigger" and e.step == step]
        if cap and cap[0] is not None:
            capture = (int(step), int(cap[0]))
    out = [Figure("Loss", pictures.loss_curve(data, step))]
    try:
        out.append(Figure("Gradient norm per layer over steps", pictures.heatmap(data, anomaly_step=step, capture=capture)))
    except pictures.PictureError:
        pass
    if step is not None:
        try:
            out.append(Figure(f"Gradient flow at step {step}", pictures.gradient_flow(data, int(step))))
        except pictures.PictureError:
            pass
    with RunStore(data.path) as store:
        every = store.tensors() if step is not None else []
    tensors = [t for t in every if t.step == step]
    # activations are captured from the first forward pass after the anomaly (the user's forward is never re-run)
    act_step = min((t.step for t in every if t.role == "activation" and step is not None and t.step >= step), default=None)
    cause = (diagnosis.get("root_cause") or {}).get("module")
    acts = [t for t in every if t.role == "activation" and t.step == act_step]
    acts.sort(key=lambda t: (t.module != cause, t.id))
    for t in acts[:3]:
        out.append(Figure(f"Activations of {t.module} at step {t.step}", pictures.histogram(data.path, t.id)))
    for t in acts:
        if len(t.shape) >= 2 and t.shape[-1] == t.shape[-2] and ("softmax" in t.module or "attn" in t.module):
            out.append(Figure(f"Attention map {t.module} at step {t.step}", pictures.attention(data.path, t.id)))
            break
    emb = [t for t in tensors if t.role == "weight" and len(t.shape) == 2 and data.index.get(t.module) is not None
           and data.modules[data.index[t.module]].type in ("Embedding", "EmbeddingBag")]
    if emb:
        out.append(Figure(f"Embeddings of {emb[0].module} (PCA) at step {emb[0].step}", pictures.projection(data.path, emb[0].id)))
    return out


def html_report(data: RunData, d: dict[str, Any]) -> str:
    e = html.escape
    figs = figures(data, d)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">",
        f"<title>gradsight report - {e(str(d.get('run', {}).get('script') or 'run'))}</title>",
        "<style>body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "h1{font-size:22px}h2{font-size:17px;margin-top:1.6em;border-bottom:1px solid #ddd}"
        "pre{background:#f6f6f6;padding:.6em;overflow:auto}table{border-collapse:collapse;width:100%}"
        "td,th{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top;font-size:13px}"
        ".bad{color:#b00}.warn{color:#a60}.ok{color:#070}img{max-width:100%}</style></head><body>",
        "<h1>gradsight report</h1>",
        "<ul>" + "".join(f"<li>{e(line)}</li>" for line in headline(d)) + "</ul>",
    ]
    if d.get("fixes"):
        parts.append("<h2>Fixes</h2>")
        for f in d["fixes"]:
            where = f.get("where")
            loc = f" <small>({e(str(where['file']))}:{where['line']})</small>" if where else ""
            parts.append(f"<h3>{e(f['title'])}{loc}</h3><p>{e(f.get('explanation', ''))}</p><pre>{e(f['snippet'])}</pre>")
            parts.append("<p>Validate:</p><ol>" + "".join(f"<li>{e(v)}</li>" for v in f["validation"]) + "</ol>")
    parts.append("<h2>Pictures</h2>")
    for fig in figs:
        b64 = base64.b64encode(fig.png).decode()
        parts.append(f"<h3>{e(fig.title)}</h3><img alt='{e(fig.title)}' src='data:image/png;base64,{b64}'>")
    parts.append("<h2>Layers</h2><table><tr><th>module</th><th>type</th><th>health</th><th>issues</th><th>source</th></tr>")
    for layer in sorted(d["layers"], key=lambda x: (x["health"], x["module"])):
        cls = "bad" if layer["health"] < 50 else "warn" if layer["health"] < 80 else "ok"
        issues = "<br>".join(f"{e(i['severity'])}: {e(i['kind'])} - {e(i['evidence'])}" for i in layer["issues"])
        src = layer.get("source")
        src_text = f"{e(str(src['file']).rsplit('/', 1)[-1])}:{src['line']}" if src else ""
        parts.append(f"<tr><td>{e(layer['module'] or '(model)')}</td><td>{e(layer['type'])}</td>"
                     f"<td class='{cls}'>{layer['health']}</td><td>{issues}</td><td>{src_text}</td></tr>")
    parts.append("</table>")
    outside = d.get("findings") or []
    if outside:
        parts.append("<h2>Loss, optimizer and input</h2><ul>" + "".join(
            f"<li>{e(f['severity'])}: {e(f['module'])} {e(f['kind'])} - {e(f['evidence'])}</li>" for f in outside) + "</ul>")
    parts.append(f"<p><small>From the run store {e(data.path)}; schema {e(d['schema'])}.</small></p></body></html>")
    return "".join(parts)


def pdf_report(data: RunData, d: dict[str, Any], path: str) -> None:
    figs = figures(data, d)
    with PdfPages(path) as pdf:
        page = plt.figure(figsize=(8.27, 11.69))
        y = 0.95
        page.text(0.06, y, "gradsight report", fontsize=18, weight="bold")
        y -= 0.04
        for line in headline(d):
            for part in textwrap.wrap(line, 95) or [""]:
                page.text(0.06, y, part, fontsize=9.5, family="monospace")
                y -= 0.022
        y -= 0.015
        for f in d.get("fixes", [])[:4]:
            if y < 0.12:
                break
            page.text(0.06, y, f"Fix: {f['title']}", fontsize=11, weight="bold")
            y -= 0.024
            for ln in f["snippet"].splitlines()[:6]:
                page.text(0.08, y, ln[:100], fontsize=8, family="monospace")
                y -= 0.018
            for v in f["validation"][:3]:
                for part in textwrap.wrap("- " + v, 100):
                    page.text(0.08, y, part, fontsize=8)
                    y -= 0.017
            y -= 0.01
        pdf.savefig(page)
        plt.close(page)
        for fig in figs:
            img = plt.imread(io.BytesIO(fig.png), format="png")
            wide = img.shape[1] > img.shape[0]
            page = plt.figure(figsize=(11.69, 8.27) if wide else (8.27, 11.69))  # landscape A4 for wide pictures
            ax = page.add_axes((0.04, 0.05, 0.92, 0.86))
            ax.imshow(img)
            ax.axis("off")
            page.text(0.05, 0.94, fig.title, fontsize=13, weight="bold")
            pdf.savefig(page)
            plt.close(page)
        worst = sorted([x for x in d["layers"] if x["issues"]], key=lambda x: x["health"])[:40]
        if worst:
            page = plt.figure(figsize=(8.27, 11.69))
            page.text(0.05, 0.95, "Layers with issues", fontsize=13, weight="bold")
            y = 0.91
            for layer in worst:
                for issue in layer["issues"]:
                    if y < 0.05:
                        break
                    text = f"{layer['health']:>3}  {layer['module'] or '(model)'}: {issue['severity']} {issue['kind']} - {issue['evidence']}"
                    for part in textwrap.wrap(text, 110)[:2]:
                        page.text(0.05, y, part, fontsize=7.5, family="monospace")
                        y -= 0.016
            pdf.savefig(page)
            plt.close(page)
        info = pdf.infodict()
        info["Title"] = "gradsight report"
        info["Creator"] = "gradsight"
