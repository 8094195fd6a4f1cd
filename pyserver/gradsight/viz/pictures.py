"""Pictures from the run store alone (matplotlib, no torch). Each returns PNG (or SVG) bytes.

- :func:`heatmap`: log10 gradient norm, modules (forward order) x steps, the anomaly and
  capture window marked; long runs are averaged into at most ``max_columns`` columns.
- :func:`gradient_flow`: per-layer gradient norm at one step.
- :func:`histogram`: distribution of a captured tensor (activation, gradient, weight).
- :func:`attention`: a captured attention map (layer and head chosen).
- :func:`projection`: a 2-D projection of captured embeddings (PCA; t-SNE with scikit-learn).
"""

from __future__ import annotations

import fnmatch
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..analysis.data import RunData  # noqa: E402
from ..store import RunStore, StoreError  # noqa: E402
from .panels import layers_in_order  # noqa: E402


class PictureError(ValueError):
    pass


def _encode(fig: Any, fmt: str = "png", dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight", metadata={"Software": "gradsight"} if fmt == "png" else None)
    plt.close(fig)
    return buf.getvalue()


def heatmap(data: RunData, *, anomaly_step: int | None = None, capture: tuple[int, int] | None = None,
            max_columns: int = 400, max_rows: int = 200, fmt: str = "png",
            steps_between: tuple[int, int] | None = None, modules: str | None = None) -> bytes:
    """Log gradient norm per layer (rows, forward order) over steps; ``steps_between`` (inclusive) and
    ``modules`` (a glob, or a part of the name) narrow it down."""
    steps, g = data.metric("grad_norm")
    if not g.size:
        raise PictureError(f"{data.path}: no gradient norms recorded")
    if steps_between is not None:
        keep = (steps >= steps_between[0]) & (steps <= steps_between[1])
        if not keep.any():
            raise PictureError(f"no gradient norms recorded between steps {steps_between[0]} and {steps_between[1]}")
        steps, g = steps[keep], g[keep]
    rows = layers_in_order(data, max_rows if not modules else 10**9)
    if modules:
        rows = [i for i in rows if fnmatch.fnmatchcase(data.names[i], modules) or modules in data.names[i]][:max_rows]
        if not rows:
            raise PictureError(f"no layer matches {modules!r}")
    mat = g[:, rows].astype(np.float64).T
    with np.errstate(divide="ignore", invalid="ignore"):
        logm = np.log10(np.where(mat > 0, mat, np.nan))
    cols = logm.shape[1]
    x_steps = steps
    if cols > max_columns:  # average into max_columns buckets
        edges = np.linspace(0, cols, max_columns + 1).astype(int)
        logm = np.stack([np.nanmean(logm[:, a:b], axis=1) if b > a else np.full(len(rows), np.nan)
                         for a, b in zip(edges[:-1], edges[1:])], axis=1)
        x_steps = steps[edges[:-1]]
    height = max(3.0, min(0.16 * len(rows) + 1.5, 30))
    fig, ax = plt.subplots(figsize=(11, height))
    finite = logm[np.isfinite(logm)]
    vmin, vmax = (np.percentile(finite, 1), np.percentile(finite, 99.5)) if finite.size else (-3, 3)
    im = ax.imshow(logm, aspect="auto", interpolation="nearest", cmap="magma", vmin=vmin, vmax=vmax,
                   extent=(float(x_steps[0]) - 0.5, float(x_steps[-1]) + 0.5, len(rows) - 0.5, -0.5))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([data.names[i] or "(model)" for i in rows], fontsize=max(4, min(9, 600 // max(1, len(rows)))))
    ax.set_xlabel("step")
    ax.set_title("log10 gradient norm per layer (forward order)")
    fig.colorbar(im, ax=ax, label="log10 ||grad||", fraction=0.03)
    if capture is not None:
        ax.axvspan(capture[0] - 0.5, capture[1] + 0.5, color="cyan", alpha=0.12, label="capture window")
    if anomaly_step is not None:
        ax.axvline(anomaly_step, color="cyan", lw=1.5, ls="--", label=f"anomaly (step {anomaly_step})")
        ax.legend(loc="upper left", fontsize=8, framealpha=0.8)
    return _encode(fig, fmt)


def gradient_flow(data: RunData, step: int, fmt: str = "png") -> bytes:
    steps, g = data.metric("grad_norm")
    k = int(np.searchsorted(steps, step))
    if k >= len(steps) or steps[k] != step:
        raise PictureError(f"no gradient norms recorded at step {step}")
    rows = layers_in_order(data, 200)
    vals = g[k, rows].astype(np.float64)
    fig, ax = plt.subplots(figsize=(11, 3.8))
    ax.bar(range(len(rows)), np.where(vals > 0, vals, np.nan), color="#c44e52")
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([data.names[i] for i in rows], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("gradient norm")
    ax.set_title(f"gradient flow at step {step} (input → output)")
    return _encode(fig, fmt)


def _tensor(path: str, tensor_id: int) -> tuple[Any, np.ndarray]:
    with RunStore(path) as store:
        info = next((t for t in store.tensors() if t.id == tensor_id), None)
        if info is None:
            raise PictureError(f"{path}: no captured tensor {tensor_id}")
        return info, store.tensor(tensor_id)


def histogram(path: str, tensor_id: int, fmt: str = "png") -> bytes:
    info, arr = _tensor(path, tensor_id)
    vals = arr.astype(np.float64).ravel()
    fin = vals[np.isfinite(vals)]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.hist(fin, bins=80, color="#4c72b0", log=True)
    ax.set_title(f"{info.role} of {info.module or '(input)'} at step {info.step}  "
                 f"(n={vals.size}, non-finite={vals.size - fin.size}, zero={np.mean(vals == 0):.0%})")
    ax.set_xlabel("value")
    return _encode(fig, fmt)


def attention(path: str, tensor_id: int, *, sample: int = 0, head: int = 0, fmt: str = "png") -> bytes:
    info, arr = _tensor(path, tensor_id)
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2]:
        raise PictureError(f"tensor {tensor_id} ({info.module}, shape {list(arr.shape)}) is not an attention map (needs ... x T x T)")
    a = arr
    while a.ndim > 3:
        a = a[min(sample, a.shape[0] - 1)]
    if a.ndim == 3:
        a = a[min(head, a.shape[0] - 1)]
    fig, ax = plt.subplots(figsize=(5, 4.5))
    im = ax.imshow(a, cmap="viridis", vmin=0, vmax=max(1e-9, float(np.nanmax(a))))
    ax.set_title(f"attention {info.module} step {info.step} (sample {sample}, head {head})", fontsize=9)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _encode(fig, fmt)


def projection(path: str, tensor_id: int, *, method: str = "pca", fmt: str = "png") -> bytes:
    info, arr = _tensor(path, tensor_id)
    x = arr.reshape(-1, arr.shape[-1]).astype(np.float64)[:5000]
    x = x[np.isfinite(x).all(axis=1)]
    if len(x) < 3:
        raise PictureError(f"tensor {tensor_id} has too few finite rows to project")
    if method == "tsne":
        try:
            from sklearn.manifold import TSNE  # optional
        except ImportError as exc:
            raise PictureError("t-SNE needs scikit-learn (pip install scikit-learn); PCA needs nothing") from exc
        pts = TSNE(n_components=2, init="pca", perplexity=min(30, len(x) - 1)).fit_transform(x)
    else:
        xc = x - x.mean(axis=0)
        _, _, vt = np.linalg.svd(xc, full_matrices=False)
        pts = xc @ vt[:2].T
    norms = np.linalg.norm(x, axis=1)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    sc = ax.scatter(pts[:, 0], pts[:, 1], c=norms, s=10, cmap="plasma")
    fig.colorbar(sc, ax=ax, label="row norm", fraction=0.046)
    ax.set_title(f"{method.upper()} of {info.module} {info.role} (step {info.step})", fontsize=9)
    return _encode(fig, fmt)


def loss_curve(data: RunData, anomaly_step: int | None = None, fmt: str = "png") -> bytes:
    steps, loss = data.steps["step"], data.steps["loss"]
    fig, ax = plt.subplots(figsize=(11, 2.8))
    ax.plot(steps, loss, color="#333", lw=1)
    if np.isfinite(loss).any() and np.nanmax(loss) > 20 * max(1e-12, np.nanmin(np.abs(loss))):
        ax.set_yscale("symlog")
    if anomaly_step is not None:
        ax.axvline(anomaly_step, color="#c44e52", ls="--", lw=1.2, label=f"anomaly (step {anomaly_step})")
        ax.legend(fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("loss")
    return _encode(fig, fmt)


__all__ = ["PictureError", "StoreError", "attention", "gradient_flow", "heatmap", "histogram", "loss_curve", "projection"]
