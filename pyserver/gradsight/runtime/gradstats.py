"""Per-step gradient statistics: fused norms on the device, one copy to the host.

Every step: L2 and max-abs norm of each gradient (``torch._foreach_norm``).
On sampled steps also mean |grad| (L1), zero counts, weight norms and the
update ratio. Everything a step needs is concatenated into one tensor and
copied to the host once (:class:`Transfer`); per-module values are then one
matrix product over per-parameter values (:func:`per_module`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .layout import Layout


class Transfer:
    """Collects 1-D device tensors and brings them to the host in one copy per device."""

    def __init__(self) -> None:
        self._parts: list[tuple[str, torch.Tensor]] = []

    def add(self, name: str, values: torch.Tensor | list[torch.Tensor]) -> None:
        if isinstance(values, list):
            if not values:
                return
            values = torch.stack([v.reshape(()) for v in values])
        self._parts.append((name, values.detach().reshape(-1).to(torch.float32)))

    def fetch(self) -> dict[str, np.ndarray]:
        by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
        for name, t in self._parts:
            by_device.setdefault(t.device, []).append((name, t))
        out: dict[str, np.ndarray] = {}
        for parts in by_device.values():
            flat = torch.cat([t for _, t in parts]).cpu().numpy()
            pos = 0
            for name, t in parts:
                n = t.numel()
                out[name] = flat[pos : pos + n]
                pos += n
        self._parts.clear()
        return out


def _by_device(tensors: list[torch.Tensor]) -> bool:
    return len({(t.device, t.dtype) for t in tensors}) <= 1


def foreach_norm(tensors: list[torch.Tensor], ord: float = 2.0) -> list[torch.Tensor]:
    """``torch._foreach_norm`` with a per-tensor fallback for mixed devices or dtypes."""
    if not tensors:
        return []
    if _by_device(tensors):
        return list(torch._foreach_norm(tensors, ord))
    return [torch.linalg.vector_norm(t, ord) for t in tensors]


@dataclass
class GradSample:
    """Host-side per-parameter values of one step (NaN where a parameter has no value)."""

    present: np.ndarray  # bool: parameter has a gradient
    l2: np.ndarray
    linf: np.ndarray
    l1: np.ndarray | None = None
    zeros: np.ndarray | None = None
    weight_l2: np.ndarray | None = None


def queue_grads(layout: Layout, transfer: Transfer, sampled: bool) -> list[int]:
    """Queue this step's gradient norms on ``transfer``; returns the ids of parameters with a gradient."""
    idx = [j for j, p in enumerate(layout.params) if p.grad is not None]
    grads = [layout.params[j].grad for j in idx]
    grads_t: list[torch.Tensor] = [g for g in grads if g is not None]
    if grads_t and any(g.is_sparse for g in grads_t):
        grads_t = [g.to_dense() if g.is_sparse else g for g in grads_t]
    transfer.add("l2", foreach_norm(grads_t, 2.0))
    transfer.add("linf", foreach_norm(grads_t, float("inf")))
    if sampled:
        transfer.add("l1", foreach_norm(grads_t, 1.0))
        transfer.add("zeros", [g.numel() - torch.count_nonzero(g) for g in grads_t])
        transfer.add("weight_l2", foreach_norm([p.detach() for p in layout.params], 2.0))
    return idx


def read_grads(layout: Layout, host: dict[str, np.ndarray], idx: list[int]) -> GradSample:
    n = len(layout.params)

    def spread(values: np.ndarray | None) -> np.ndarray | None:
        if values is None:
            return None
        out = np.full(n, np.nan)
        out[idx] = values
        return out

    present = np.zeros(n, dtype=bool)
    present[idx] = True
    empty = np.zeros(0)
    l2 = spread(host.get("l2", empty))
    linf = spread(host.get("linf", empty))
    assert l2 is not None and linf is not None
    return GradSample(present, l2, linf, spread(host.get("l1")), spread(host.get("zeros")), host.get("weight_l2"))


def per_module(layout: Layout, s: GradSample) -> dict[str, np.ndarray]:
    """Per-module gradient metrics (modules x values) from per-parameter ones."""
    m = layout.member
    has = m @ s.present.astype(np.float64)
    none = has == 0
    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        out["grad_norm"] = np.where(none, np.nan, np.sqrt(m @ np.where(s.present, s.l2, 0.0) ** 2))
        linf = np.where(s.present, s.linf, -np.inf)
        gmax = np.where(m > 0, linf[None, :], -np.inf).max(axis=1) if m.size else np.zeros(len(has))
        out["grad_max"] = np.where(none, np.nan, gmax)
        numel = m @ (layout.numel * s.present)
        if s.l1 is not None:
            out["grad_mean"] = np.where(none, np.nan, (m @ np.where(s.present, s.l1, 0.0)) / numel)
        if s.zeros is not None:
            out["grad_zero_frac"] = np.where(none, np.nan, (m @ np.where(s.present, s.zeros, 0.0)) / numel)
        if s.weight_l2 is not None:
            total = m.sum(axis=1)
            out["weight_norm"] = np.where(total == 0, np.nan, np.sqrt(m @ s.weight_l2**2))
    return out


def nonfinite_counts(layout: Layout, s: GradSample) -> np.ndarray | None:
    """NaN/Inf count per parameter, computed only when some norm is not finite (rare)."""
    bad = [j for j in range(len(layout.params)) if s.present[j] and not np.isfinite(s.l2[j])]
    if not bad:
        return None
    counts = np.zeros(len(layout.params))
    for j in bad:
        g = layout.params[j].grad
        if g is not None:
            counts[j] = float((~torch.isfinite(g)).sum())
    return counts


class UpdateTracker:
    """|dW| / |W| (mean absolute values, L1) for the parameters an optimizer steps, on sampled steps."""

    def __init__(self) -> None:
        self._before: list[torch.Tensor] | None = None
        self._ids: list[int] = []

    def before(self, layout: Layout, ids: list[int]) -> None:
        params = [layout.params[j].detach() for j in ids]
        self._ids = ids
        self._before = [p.clone() for p in params]

    def after(self, layout: Layout, transfer: Transfer) -> list[int] | None:
        """Queue ||dW||_1 and ||W||_1 for the next transfer; returns the parameter ids they belong to."""
        if self._before is None:
            return None
        now = [layout.params[j].detach() for j in self._ids]
        same = _by_device(now) and _by_device(self._before)
        delta = torch._foreach_sub(now, self._before) if same else [a - b for a, b in zip(now, self._before)]
        transfer.add("upd_delta", foreach_norm(list(delta), 1.0))
        transfer.add("upd_weight", foreach_norm(self._before, 1.0))
        self._before = None
        return self._ids


def update_ratio(layout: Layout, ids: list[int], delta: np.ndarray, weight: np.ndarray) -> np.ndarray:
    d = np.zeros(len(layout.params))
    w = np.zeros(len(layout.params))
    d[ids] = delta
    w[ids] = weight
    m = layout.member
    with np.errstate(invalid="ignore", divide="ignore"):
        mask = np.zeros(len(layout.params))
        mask[ids] = 1.0
        covered = m @ mask
        return np.where(covered == 0, np.nan, (m @ d) / (m @ w))
