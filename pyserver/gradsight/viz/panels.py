"""The editor panel's data: what the webview draws, as JSON-safe numbers (numpy only, no matplotlib, no torch).

Every value comes from rows of the run store: the per-step gradient norms (``metrics``),
the steps table (loss, learning rate, global norm) and the captured tensors (``tensors``:
attention probabilities, activations, weights, gradients, inputs). Non-finite values travel
as ``null`` with their places listed beside them (JSON has no NaN).

- :func:`gradients`: the heatmap (layers in forward order x steps, bucketed to at most
  ``max_columns`` columns by the bucket's largest norm, so a spike is never averaged away),
  the gradient flow at one step, the loss and global norm.
- :func:`histogram`: a captured tensor's distribution, beside the same module's tensor at
  another captured step (the nearest, before the anomaly when there is one).
- :func:`attention`: one head's map of one sample, the entropy of every head, the collapsed head.
- :func:`projection`: PCA (or t-SNE, with scikit-learn) of a captured tensor's rows.
- :func:`samples`: the anomalous sample beside a normal one, layer by layer, at a step.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..analysis.data import RunData
from ..store import RunStore, StoreError, TensorInfo

# a head whose mean attention entropy is below this share of the uniform entropy (log T) has collapsed
# onto a few keys; 0.15 of log(24) is ~0.48 nats, about all weight on one or two tokens
COLLAPSED_ENTROPY = 0.15
MAX_PROJECTED = 2000  # rows a projection takes (PCA); t-SNE takes at most TSNE_ROWS
TSNE_ROWS = 600
HISTOGRAM_BINS = 60


class PanelError(ValueError):
    """The data asked for is not in the run (no such tensor, a tensor that is not an attention map, ...)."""


def clean(values: np.ndarray, digits: int = 5) -> list[float | None]:
    """A float array as a JSON list: rounded to ``digits`` significant digits, NaN/Inf as None."""
    v = np.asarray(values, dtype=np.float64).ravel()
    out: list[float | None] = []
    for x in v.tolist():
        out.append(float(f"{x:.{digits}g}") if math.isfinite(x) else None)
    return out


def layers_in_order(data: RunData, max_rows: int) -> list[int]:
    """Layers in forward order; with more than ``max_rows``, the deepest cut of the module tree that fits
    (a container's gradient norm covers all its layers)."""
    rank = data.forward_rank()
    leaves = sorted(data.own_layers(), key=lambda i: rank[i])
    if len(leaves) <= max_rows:
        return leaves
    depth_of = {m.id: (m.name.count(".") + 1 if m.name else 0) for m in data.modules}
    chosen: list[int] = [0]
    for depth in range(1, max(depth_of.values()) + 1):
        rows = [m.id for m in data.modules if m.n_params > 0 and m.name and (
            depth_of[m.id] == depth or (depth_of[m.id] < depth and m.id in leaves))]
        if len(rows) > max_rows:
            break
        chosen = rows
    return sorted(chosen, key=lambda i: rank[i])


def label_of(data: RunData, module: str) -> str:
    i = data.index.get(module)
    info = data.modules[i] if i is not None else None
    return (info.label if info is not None and info.label else None) or module or "(model)"


def _series(steps: np.ndarray, values: np.ndarray, keep: np.ndarray | None, max_points: int) -> dict[str, Any]:
    if keep is not None:
        steps, values = steps[keep], values[keep]
    if len(steps) > max_points:  # a point per bucket: the bucket's largest value keeps spikes visible
        edges = np.linspace(0, len(steps), max_points + 1).astype(int)
        idx = [a + int(np.nanargmax(np.where(np.isfinite(values[a:b]), values[a:b], -np.inf))) if b > a else a
               for a, b in zip(edges[:-1], edges[1:])]
        steps, values = steps[idx], values[idx]
    return {"steps": [int(s) for s in steps], "values": clean(values), "nonfinite": [int(s) for s, v in zip(steps, values) if not np.isfinite(v)]}


def gradients(data: RunData, *, health: dict[str, dict[str, Any]] | None = None, anomaly: int | None = None,
              steps_between: tuple[int, int] | None = None, modules: str | None = None, step: int | None = None,
              max_columns: int = 600, max_rows: int = 200) -> dict[str, Any]:
    """The heatmap's matrix (rows: layers in forward order; columns: steps or buckets of steps), the gradient flow at
    ``step`` (default: the anomaly, else the last step), the loss and the global gradient norm over the same steps."""
    steps, g = data.metric("grad_norm")
    if not g.size:
        raise PanelError(f"{data.path}: no gradient norms recorded yet")
    first, last = int(steps[0]), int(steps[-1])
    keep = None
    if steps_between is not None:
        lo, hi = min(steps_between), max(steps_between)
        keep = (steps >= lo) & (steps <= hi)
        if not keep.any():
            raise PanelError(f"no gradient norms recorded between steps {lo} and {hi}")
        steps, g = steps[keep], g[keep]
    rows = layers_in_order(data, max_rows if not modules else 10**9)
    if modules:
        rows = [i for i in rows if fnmatch.fnmatchcase(data.names[i], modules) or modules in data.names[i]
                or modules in label_of(data, data.names[i])][:max_rows]
        if not rows:
            raise PanelError(f"no layer matches {modules!r}")
    mat = g[:, rows].astype(np.float64).T  # rows x steps
    n = mat.shape[1]
    if n > max_columns:
        edges = np.linspace(0, n, max_columns + 1).astype(int)
        cols, starts, ends = [], [], []
        for a, b in zip(edges[:-1], edges[1:]):
            chunk = mat[:, a:b]
            bad = ~np.isfinite(chunk)
            with np.errstate(invalid="ignore"):
                col = np.where(bad.any(axis=1), np.inf, np.nanmax(np.where(bad, -np.inf, chunk), axis=1))
            cols.append(col)
            starts.append(int(steps[a]))
            ends.append(int(steps[b - 1]))
        mat = np.stack(cols, axis=1)
    else:
        starts = ends = [int(s) for s in steps]
    nonfinite = [[int(r), int(c)] for r, c in zip(*np.nonzero(~np.isfinite(mat) & ~np.isnan(mat)))]
    all_steps, all_g = data.metric("grad_norm")
    chosen = step if step is not None else anomaly if anomaly is not None else last
    k = int(np.searchsorted(all_steps, chosen))
    if k >= len(all_steps) or all_steps[k] != chosen:
        k = min(max(0, k), len(all_steps) - 1)
        chosen = int(all_steps[k])
    flow = all_g[k, rows].astype(np.float64)
    health = health or {}
    step_col = data.steps["step"]
    step_keep = None if steps_between is None else (step_col >= min(steps_between)) & (step_col <= max(steps_between))
    return {
        "range": [first, last], "steps": starts, "until": ends, "bucketed": n > max_columns,
        "rows": [{"module": data.names[i], "label": label_of(data, data.names[i]), "type": data.modules[i].type,
                  "file": data.modules[i].file, "line": data.modules[i].line,
                  "health": (health.get(data.names[i]) or {}).get("health")} for i in rows],
        "values": [clean(r) for r in mat],
        "nonfinite": nonfinite,
        "flow": {"step": chosen, "values": clean(flow)},
        "loss": _series(step_col, data.steps["loss"], step_keep, max(max_columns, 1000)),
        "gradNorm": _series(step_col, data.steps["grad_norm"], step_keep, max(max_columns, 1000)),
        "anomaly": anomaly,
    }


# -- captured tensors ------------------------------------------------------------------------------------

def is_attention(info: TensorInfo) -> bool:
    """Attention probabilities: the ``attention`` role, or an activation of shape (batch, heads, queries, keys) with
    queries == keys (a softmax module's output inside an attention block)."""
    if info.role == "attention":
        return True
    return info.role == "activation" and len(info.shape) == 4 and info.shape[-1] == info.shape[-2] and info.shape[-1] > 1


def tensor_list(path: str, data: RunData | None = None) -> list[dict[str, Any]]:
    with RunStore(path) as store:
        infos = store.tensors()
    out = []
    for t in infos:
        info = data.modules[data.index[t.module]] if data is not None and t.module in data.index else None
        out.append({"id": t.id, "step": t.step, "module": t.module, "label": label_of(data, t.module) if data is not None else t.module,
                    "type": info.type if info is not None else None,
                    "role": t.role, "shape": list(t.shape), "dtype": t.dtype, "attention": is_attention(t)})
    return out


def _load(path: str, tensor_id: int) -> tuple[TensorInfo, np.ndarray, list[TensorInfo]]:
    try:
        with RunStore(path) as store:
            infos = store.tensors()
            info = next((t for t in infos if t.id == tensor_id), None)
            if info is None:
                raise PanelError(f"{path}: no captured tensor {tensor_id}")
            return info, store.tensor(tensor_id), infos
    except StoreError as exc:
        raise PanelError(str(exc)) from exc


@dataclass(frozen=True)
class Hist:
    edges: np.ndarray
    counts: np.ndarray


def _hist(values: np.ndarray, edges: np.ndarray | None = None, bins: int = HISTOGRAM_BINS) -> Hist:
    fin = values[np.isfinite(values)]
    if edges is None:
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 1.0)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
    counts, _ = np.histogram(np.clip(fin, edges[0], edges[-1]), bins=edges)
    return Hist(edges, counts)


def _stats(values: np.ndarray) -> dict[str, Any]:
    fin = values[np.isfinite(values)]
    return {"n": int(values.size), "nonfinite": int(values.size - fin.size), "zeros": float(np.mean(values == 0)) if values.size else 0.0,
            "min": clean(np.array([fin.min() if fin.size else np.nan]))[0], "max": clean(np.array([fin.max() if fin.size else np.nan]))[0],
            "mean": clean(np.array([fin.mean() if fin.size else np.nan]))[0], "std": clean(np.array([fin.std() if fin.size else np.nan]))[0]}


def histogram(path: str, tensor_id: int, *, anomaly: int | None = None, compare: int | None = None) -> dict[str, Any]:
    """The tensor's histogram, beside the same module and role at another step (``compare``, else the nearest captured
    step before the anomaly, else after it), on shared bins."""
    info, arr, infos = _load(path, tensor_id)
    values = arr.astype(np.float64).ravel()
    others = [t for t in infos if t.module == info.module and t.role == info.role and t.step != info.step]
    other: TensorInfo | None = None
    if compare is not None:
        other = next((t for t in infos if t.id == compare), None)
    elif others:
        ref = anomaly if anomaly is not None else info.step
        before = [t for t in others if t.step < ref]
        other = max(before, key=lambda t: t.step) if before else min(others, key=lambda t: abs(t.step - info.step))
    base_values = None
    if other is not None:
        with RunStore(path) as store:
            base_values = store.tensor(other.id).astype(np.float64).ravel()
    both = values if base_values is None else np.concatenate([values[np.isfinite(values)], base_values[np.isfinite(base_values)]])
    h = _hist(both)
    mine = _hist(values, h.edges)
    out: dict[str, Any] = {"id": info.id, "module": info.module, "role": info.role, "step": info.step, "shape": list(info.shape),
                           "edges": clean(h.edges), "counts": [int(c) for c in mine.counts], "stats": _stats(values), "compare": None}
    if base_values is not None and other is not None:
        out["compare"] = {"id": other.id, "step": other.step, "counts": [int(c) for c in _hist(base_values, h.edges).counts],
                          "stats": _stats(base_values)}
    return out


def _entropy(p: np.ndarray) -> np.ndarray:
    """Mean over queries of -sum p log p over keys: (..., queries, keys) -> (...)."""
    q = np.clip(p.astype(np.float64), 1e-12, 1.0)
    return (-(q * np.log(q)).sum(axis=-1)).mean(axis=-1)


def attention(path: str, tensor_id: int, *, sample: int = 0, head: int = 0) -> dict[str, Any]:
    """One head's attention map for one sample, every head's entropy (over all samples and for this one), the collapsed
    heads, and token labels from the step's input when it is token ids."""
    info, arr, infos = _load(path, tensor_id)
    if not is_attention(info):
        raise PanelError(f"tensor {tensor_id} ({info.module} {info.role}, shape {list(info.shape)}) is not an attention map "
                         "(needs batch x heads x queries x keys)")
    a = arr.astype(np.float64)
    if a.ndim == 3:
        a = a[None]
    b, h, t, _ = a.shape
    sample, head = min(max(0, sample), b - 1), min(max(0, head), h - 1)
    finite = np.isfinite(a)
    safe = np.where(finite, a, 0.0)
    uniform = math.log(t) if t > 1 else 1.0
    per_head = _entropy(safe).mean(axis=0) / uniform  # heads, over the batch
    this = _entropy(safe[sample]) / uniform
    collapsed = [int(i) for i in np.flatnonzero(per_head < COLLAPSED_ENTROPY)]
    tokens = None
    inputs = [x for x in infos if x.role == "input" and x.step == info.step]
    if inputs:
        with RunStore(path) as store:
            inp = store.tensor(inputs[0].id)
        if inp.ndim == 2 and inp.shape[1] == t and np.issubdtype(inp.dtype, np.integer):
            tokens = [str(int(x)) for x in inp[min(sample, inp.shape[0] - 1)]]
    return {"id": info.id, "module": info.module, "role": info.role, "step": info.step, "shape": [b, h, t, t],
            "sample": sample, "head": head, "map": [clean(r, 4) for r in safe[sample, head]],
            "nonfinite": int((~finite[sample, head]).sum()),
            "entropy": clean(per_head, 4), "entropySample": clean(this, 4), "collapsed": collapsed,
            "collapsedBelow": COLLAPSED_ENTROPY, "tokens": tokens}


def projection(path: str, tensor_id: int, *, method: str = "pca", color: str = "auto") -> dict[str, Any]:
    """A 2-D projection of the tensor's rows (the last axis is the feature): an embedding table's tokens, or the
    activations of every (sample, position). ``color``: ``row`` (token id or sample), ``position``, ``step`` (the same
    module's tensors at every captured step, projected together), ``norm``."""
    info, arr, infos = _load(path, tensor_id)
    if arr.ndim < 2:
        raise PanelError(f"tensor {tensor_id} ({info.module}, shape {list(arr.shape)}) has no rows to project")
    method = method.lower()
    if method not in ("pca", "tsne"):
        raise PanelError(f"unknown projection {method!r}: pca or tsne")
    parts = [(info, arr)]
    if color == "step":
        with RunStore(path) as store:
            parts = [(t, store.tensor(t.id)) for t in infos if t.module == info.module and t.role == info.role and t.shape[1:] == info.shape[1:]]
    xs, colors = [], []
    for t, a in parts:
        x = a.reshape(-1, a.shape[-1]).astype(np.float64)
        lead = a.shape[:-1]
        if color in ("position",) and len(lead) >= 2:
            c = np.tile(np.arange(lead[-1]), int(np.prod(lead[:-1])))
        elif color == "step":
            c = np.full(len(x), t.step)
        elif color == "norm":
            c = np.linalg.norm(np.where(np.isfinite(x), x, 0), axis=1)
        else:  # row: the token id of an embedding table, the sample of an activation
            c = np.arange(len(x)) if len(lead) == 1 else np.repeat(np.arange(lead[0]), int(np.prod(lead[1:])))
        xs.append(x)
        colors.append(c)
    x, c = np.concatenate(xs), np.concatenate(colors).astype(np.float64)
    ok = np.isfinite(x).all(axis=1)
    dropped = int((~ok).sum())
    x, c = x[ok], c[ok]
    limit = TSNE_ROWS if method == "tsne" else MAX_PROJECTED
    if len(x) > limit:  # evenly spread rows, so every sample and position stays represented
        pick = np.linspace(0, len(x) - 1, limit).astype(int)
        x, c = x[pick], c[pick]
    if len(x) < 3:
        raise PanelError(f"tensor {tensor_id} has too few finite rows to project ({len(x)})")
    explained = None
    if method == "tsne":
        try:
            from sklearn.manifold import TSNE  # optional: only when the user has scikit-learn
        except ImportError as exc:
            raise PanelError("t-SNE needs scikit-learn in the server's interpreter (pip install scikit-learn); PCA needs nothing") from exc
        pts = TSNE(n_components=2, init="pca", perplexity=float(min(30, len(x) - 1)), random_state=0).fit_transform(x)
    else:
        xc = x - x.mean(axis=0)
        _, sv, vt = np.linalg.svd(xc, full_matrices=False)
        pts = xc @ vt[:2].T
        var = sv ** 2
        explained = clean(var[:2] / var.sum(), 3) if var.sum() > 0 else None
    return {"id": info.id, "module": info.module, "role": info.role, "step": info.step, "shape": list(info.shape), "method": method,
            "color": color if color != "auto" else "row", "x": clean(pts[:, 0], 4), "y": clean(pts[:, 1], 4), "c": clean(c, 4),
            "dropped": dropped, "explained": explained, "steps": sorted({t.step for t, _ in parts})}


def samples(path: str, data: RunData, step: int | None = None) -> dict[str, Any]:
    """Layer by layer at ``step`` (default: the step with most captured activations): each sample's RMS and largest
    magnitude of every captured activation; the anomalous sample (the largest magnitude relative to the batch's median,
    or the first with a non-finite value) beside the median sample."""
    with RunStore(path) as store:
        acts = [t for t in store.tensors() if t.role == "activation" and len(t.shape) >= 2]
        if not acts:
            raise PanelError(f"{path}: no activations were captured (they are captured at an anomaly)")
        if step is None:
            counts: dict[int, int] = {}
            for t in acts:
                counts[t.step] = counts.get(t.step, 0) + 1
            step = max(counts, key=lambda s: (counts[s], -s))
        here = [t for t in acts if t.step == step]
        if not here:
            raise PanelError(f"no activations captured at step {step} (captured at {sorted({t.step for t in acts})})")
        batch = max({t.shape[0] for t in here}, key=lambda b: sum(1 for t in here if t.shape[0] == b))
        rank = data.forward_rank()
        here = sorted((t for t in here if t.shape[0] == batch),
                      key=lambda t: (rank.get(data.index.get(t.module, -1), 10**9), t.id))
        rms, peak, bad = [], [], []
        for t in here:
            a = store.tensor(t.id).astype(np.float64).reshape(batch, -1)
            fin = np.isfinite(a)
            z = np.where(fin, a, 0.0)
            rms.append(np.sqrt((z ** 2).mean(axis=1)))
            peak.append(np.abs(z).max(axis=1))
            bad.append((~fin).any(axis=1))
    r, pk, nf = np.stack(rms), np.stack(peak), np.stack(bad)  # layers x samples
    median = np.median(pk, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.nanmax(np.where(median > 0, pk / median, 1.0), axis=0)
    nonfinite_samples = np.flatnonzero(nf.any(axis=0))
    odd = int(nonfinite_samples[0]) if len(nonfinite_samples) else int(np.argmax(rel))
    typical = int(np.argsort(rel)[len(rel) // 2])
    if typical == odd and len(rel) > 1:
        typical = int(np.argsort(rel)[max(0, len(rel) // 2 - 1)])
    return {"step": step, "batch": batch, "anomalous": odd, "normal": typical, "ratio": clean(np.array([rel[odd]]))[0],
            "layers": [{"module": t.module, "label": label_of(data, t.module), "id": t.id,
                        "anomalous": {"rms": clean(r[i, odd:odd + 1])[0], "max": clean(pk[i, odd:odd + 1])[0], "nonfinite": bool(nf[i, odd])},
                        "normal": {"rms": clean(r[i, typical:typical + 1])[0], "max": clean(pk[i, typical:typical + 1])[0],
                                   "nonfinite": bool(nf[i, typical])}}
                       for i, t in enumerate(here)]}
