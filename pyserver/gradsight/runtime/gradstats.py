"""Per-step gradient statistics: fused norms on the device, one copy to the host.

Every step: L2 and max-abs norm of each gradient (``torch._foreach_norm``).
On sampled steps also mean |grad| (L1), zero counts, weight norms and the
update ratio. Everything a step needs is concatenated into one tensor and
copied to the host once (:class:`Transfer`); per-module values are then one
matrix product over per-parameter values (:func:`per_module`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .layout import Layout, local


class Transfer:
    """Collects 1-D device tensors and brings them to the host in one copy per device."""

    def __init__(self) -> None:
        self._parts: list[tuple[str, torch.Tensor]] = []

    def add(self, name: str, values: torch.Tensor | list[torch.Tensor]) -> None:
        if isinstance(values, list):
            if not values:
                return
            values = torch.stack(values)  # 0-d tensors stack into a vector
        if values.dtype != torch.float32:
            values = values.to(torch.float32)
        if values.requires_grad:
            values = values.detach()
        self._parts.append((name, values if values.dim() == 1 else values.reshape(-1)))

    def fetch(self) -> dict[str, np.ndarray]:
        by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
        for name, t in self._parts:
            by_device.setdefault(t.device, []).append((name, t))
        out: dict[str, np.ndarray] = {}
        for device, parts in by_device.items():
            if device.type == "cpu":  # already on the host: views, no copy
                for name, t in parts:
                    out[name] = t.numpy()
                continue
            tensors = [t for _, t in parts]
            flat = (tensors[0] if len(tensors) == 1 else torch.cat(tensors)).cpu().numpy()
            pos = 0
            for name, t in parts:
                n = t.numel()
                out[name] = flat[pos : pos + n]
                pos += n
        self._parts.clear()
        return out


def foreach_norm(tensors: Sequence[torch.Tensor], ord: float = 2.0) -> list[torch.Tensor]:
    """``torch._foreach_norm`` (one fused call), per tensor where it cannot take the list."""
    if not tensors:
        return []
    try:
        return list(torch._foreach_norm(list(tensors), ord))
    except RuntimeError:  # mixed devices, say
        return [torch.linalg.vector_norm(t, ord) for t in tensors]


def all_on_cpu(tensors: Sequence[torch.Tensor]) -> bool:
    return all(t.device.type == "cpu" for t in tensors)


def nonzero_counts(tensors: list[torch.Tensor], on_cpu: bool) -> torch.Tensor | list[torch.Tensor]:
    """Non-zero entries per tensor in fused calls: the 0-"norm" on accelerators. On CPU, where that
    norm is a scalar loop (and ``torch.count_nonzero`` or a boolean sum cost 6-27x a ReLU), the
    squared L2 norm of ``sign(x)`` (faster there than its L1 norm); :func:`read_grads` rounds it."""
    if not tensors:
        return []
    try:
        if not on_cpu:
            return list(torch._foreach_norm(tensors, 0))
        root = torch.stack(torch._foreach_norm(torch._foreach_sign(tensors), 2))
        return root * root
    except RuntimeError:  # mixed devices, say
        return [torch.linalg.vector_norm(torch.sign(t), 1) for t in tensors]


def max_abs(tensors: list[torch.Tensor], on_cpu: bool) -> torch.Tensor | list[torch.Tensor]:
    """Largest |x| per tensor: the fused inf-norm on accelerators; on CPU, where that norm is a
    slow reduction (tiny BERT's 41 gradients 1.2 ms), ``aminmax`` per tensor (0.14 ms)."""
    if tensors and on_cpu and all(t.numel() for t in tensors):
        pairs = [torch.aminmax(t) for t in tensors]
        return torch.maximum(torch.stack([lo for lo, _ in pairs]).abs_(), torch.stack([hi for _, hi in pairs]).abs_())
    return foreach_norm(tensors, float("inf"))


@dataclass
class GradSample:
    """Host-side per-parameter values of one step (NaN where a parameter has no value)."""

    present: np.ndarray  # bool: parameter has a gradient
    all_present: bool
    l2: np.ndarray
    linf: np.ndarray | None = None
    l1: np.ndarray | None = None
    zeros: np.ndarray | None = None
    weight_l2: np.ndarray | None = None
    gw_dot: np.ndarray | None = None  # the dot product of each gradient with its weights


Reduce = Callable[[torch.Tensor, str, "torch.Tensor | None"], torch.Tensor]


def _stacked(values: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    return values if isinstance(values, torch.Tensor) else torch.stack(values).float()


def sharded_l2(norms: torch.Tensor, mask: torch.Tensor, reduce: Reduce) -> torch.Tensor:
    """Per-parameter L2 norms from the local shards' norms: the squares summed over the ranks."""
    return reduce(norms.float() ** 2, "sum", mask).sqrt()


def queue_grads(layout: Layout, transfer: Transfer, sampled: bool, reduce: Reduce | None = None) -> list[int] | None:
    """Queue this step's gradient norms on ``transfer``: the L2 norm of every gradient each step
    (one fused call), max, mean |grad|, zero counts and weight norms on sampled steps.
    Returns the ids of parameters with a gradient, or None when all have one. Sharded (FSDP2)
    parameters are measured on this rank's shards, and ``reduce`` combines the ranks' values."""
    grads = [p.grad for p in layout.params]
    idx: list[int] | None = None
    if any(g is None for g in grads):
        idx = [j for j, g in enumerate(grads) if g is not None]
    grads_t: list[torch.Tensor] = [g for g in grads if g is not None]
    if layout.sparse and any(g.is_sparse for g in grads_t):
        grads_t = [g.coalesce().values() if g.is_sparse else g for g in grads_t]
    if not (layout.sharded_any and reduce is not None):
        transfer.add("l2", foreach_norm(grads_t, 2.0))
        if sampled:
            on_cpu = all_on_cpu(grads_t)
            transfer.add("linf", max_abs(grads_t, on_cpu))
            transfer.add("l1", foreach_norm(grads_t, 1.0))
            transfer.add("nonzero", nonzero_counts(grads_t, on_cpu))
            with torch.no_grad():  # (the parameters themselves: no detached alias per tensor)
                transfer.add("weight_l2", foreach_norm(layout.params, 2.0))
                with_grad = layout.params if idx is None else [layout.params[j] for j in idx]
                # each gradient's dot product with its weights: a weight penalty that is all the gradient points along them
                transfer.add("gw_dot", [torch.dot(g.reshape(-1), p.reshape(-1)) for g, p in zip(grads_t, with_grad)
                                        if not g.is_sparse] if not layout.sparse else [])
        return idx
    # Sharded (FSDP2): the L2 norms are reduced over the ranks at every step, unconditionally: one collective,
    # which every rank reaches at the same point whatever else differs between them (a trigger firing on one
    # rank's loss, say). The statistics of sampled steps are the local shards' (no collective that one rank could
    # skip). A rank holds an empty shard of a small parameter: it counts as zeros.
    shards = [s if s.numel() else s.new_zeros(1) for s in (local(g) for g in grads_t)]
    present = layout.sharded if idx is None else layout.sharded[idx]
    mask = torch.as_tensor(present, device=shards[0].device if shards else "cpu")
    transfer.add("l2", sharded_l2(_stacked(foreach_norm(shards, 2.0)) if shards else torch.zeros(0), mask, reduce))
    if sampled and shards:
        on_cpu = all_on_cpu(shards)
        transfer.add("linf", max_abs(shards, on_cpu))
        transfer.add("l1", foreach_norm(shards, 1.0))
        transfer.add("nonzero", nonzero_counts(shards, on_cpu))
        with torch.no_grad():
            transfer.add("weight_l2", foreach_norm([w if w.numel() else w.new_zeros(1) for w in (local(p) for p in layout.params)], 2.0))
    return idx


def read_grads(layout: Layout, host: dict[str, np.ndarray], idx: list[int] | None) -> GradSample:
    n = len(layout.params)
    if idx is None:
        present = layout.all_params
        l2 = host.get("l2", np.zeros(0)).astype(np.float64)
        return GradSample(present, True, l2, _f64(host.get("linf")), _f64(host.get("l1")), _zeros(layout.stat_numel, host), _f64(host.get("weight_l2")),
                          _f64(host.get("gw_dot")))

    def spread(values: np.ndarray | None) -> np.ndarray | None:
        if values is None:
            return None
        out = np.full(n, np.nan)
        out[idx] = values
        return out

    present = np.zeros(n, dtype=bool)
    present[idx] = True
    spread_l2 = spread(host.get("l2", np.zeros(0)).astype(np.float64))
    assert spread_l2 is not None
    return GradSample(present, False, spread_l2, spread(host.get("linf")), spread(host.get("l1")), spread(_zeros(layout.stat_numel[idx], host)),
                      _f64(host.get("weight_l2")), spread(host.get("gw_dot")))


def _zeros(numel: np.ndarray, host: dict[str, np.ndarray]) -> np.ndarray | None:
    """Zero entries per gradient from its non-zero count (a sparse gradient's missing entries are zeros)."""
    nonzero = host.get("nonzero")
    return None if nonzero is None else np.maximum(numel - np.rint(nonzero.astype(np.float64)), 0.0)


def _f64(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else a.astype(np.float64)


def module_norms(member: np.ndarray, l2: np.ndarray) -> np.ndarray:
    """Per-module L2 norms from per-parameter ones. A non-finite norm spreads to the modules holding
    that parameter only (a plain matrix product would turn every module's 0 * inf into NaN)."""
    sq = l2 * l2
    if math.isfinite(float(sq.sum())):  # (one call: most steps)
        return np.sqrt(member @ sq)
    bad = ~np.isfinite(sq)
    norm = np.sqrt(member @ np.where(bad, 0.0, sq))
    for j in np.flatnonzero(bad):  # NaN wins over inf
        rows = member[:, j] > 0
        norm[rows] = np.where(np.isnan(norm[rows]), np.nan, sq[j])
    return norm


def per_module(layout: Layout, s: GradSample) -> dict[str, np.ndarray]:
    """Per-module gradient metrics (modules x values) from per-parameter ones: one matrix product each."""
    m = layout.member
    out: dict[str, np.ndarray] = {}
    if s.all_present:  # the per-step path: no masking, no warnings to silence
        norm = module_norms(m, s.l2)
        norm[layout.no_params] = np.nan
        out["grad_norm"] = norm
        none = layout.no_params
        numel = layout.module_stat_numel
    else:
        none = (m @ s.present.astype(np.float64)) == 0
        with np.errstate(invalid="ignore", over="ignore"):
            norm = module_norms(m, np.where(s.present, s.l2, 0.0))
        norm[none] = np.nan
        out["grad_norm"] = norm
        numel = m @ (layout.stat_numel * s.present)
    if s.linf is None and s.l1 is None and s.zeros is None and s.weight_l2 is None:
        return out
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if s.linf is not None:
            linf = np.where(s.present, s.linf, -np.inf)
            gmax = np.where(m > 0, linf[None, :], -np.inf).max(axis=1) if m.size else np.zeros(len(none))
            out["grad_max"] = np.where(none, np.nan, gmax)
        if s.l1 is not None:
            out["grad_mean"] = np.where(none, np.nan, (m @ np.where(s.present, s.l1, 0.0)) / numel)
        if s.zeros is not None:
            out["grad_zero_frac"] = np.where(none, np.nan, (m @ np.where(s.present, s.zeros, 0.0)) / numel)
        if s.weight_l2 is not None:
            out["weight_norm"] = np.where(layout.no_params, np.nan, np.sqrt(m @ s.weight_l2**2))
        if s.gw_dot is not None and s.weight_l2 is not None and len(s.gw_dot) == len(s.present):
            # cos(gradient, weights): near 1 in every layer when a weight penalty is all of the gradient
            wn = np.sqrt(m @ np.where(s.present, s.weight_l2**2, 0.0))
            out["grad_weight_cos"] = np.where(none, np.nan, (m @ np.where(s.present, s.gw_dot, 0.0)) / (out["grad_norm"] * wn))
    return out


def nonfinite_counts(layout: Layout, s: GradSample) -> np.ndarray | None:
    """NaN/Inf count per parameter, computed only when some norm is not finite (rare)."""
    if np.isfinite(s.l2[s.present]).all():
        return None
    counts = np.zeros(len(layout.params))
    for j in range(len(layout.params)):
        g = layout.params[j].grad
        if s.present[j] and not np.isfinite(s.l2[j]) and g is not None:
            counts[j] = float((~torch.isfinite(local(g))).sum())
    return counts


UPDATE_SAMPLE = 16384  # elements per parameter whose update is measured


@functools.lru_cache(maxsize=4096)
def _sample_stride(numel: int) -> int:
    """1 for a small tensor; otherwise the smallest prime >= numel / UPDATE_SAMPLE, so the sample walks
    across every row and column of a matrix instead of always hitting the same columns."""
    need = -(-numel // UPDATE_SAMPLE)
    if need <= 1:
        return 1
    k = max(need, 2)
    while any(k % d == 0 for d in range(2, math.isqrt(k) + 1)):
        k += 1
    return k


def _update_sample(p: torch.Tensor) -> torch.Tensor:
    """A strided sample over the whole tensor (every element when it is small): the update ratio of a
    large parameter is estimated from at most UPDATE_SAMPLE elements instead of a copy of all of it."""
    flat = local(p).detach().reshape(-1)
    stride = _sample_stride(flat.numel())
    return flat if stride == 1 else flat[::stride]


class UpdateTracker:
    """|dW| / |W| (mean absolute values, L1) for the parameters an optimizer steps, on sampled steps,
    from a strided sample of each parameter (memory and time bounded per parameter, not per model).
    The samples before the step are copied into buffers, kept while consecutive steps are sampled
    (no allocation per step at full detail); the difference is taken in place."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []
        self._weight: list[torch.Tensor] | None = None  # ||W||_1 of each sample before the step
        self._ids: list[int] = []
        self._views: dict[int, tuple[int, torch.Tensor]] = {}  # parameter id -> (its data pointer, its sample view)

    def _samples(self, layout: Layout, ids: list[int]) -> list[torch.Tensor]:
        """The sample views of these parameters, made once (a view follows in-place updates; a
        parameter whose data was replaced gets a new one; a non-contiguous one, whose flat
        sample is a copy, a fresh one each time)."""
        out = []
        for j in ids:
            p = layout.params[j]
            ptr = p.data_ptr()
            known = self._views.get(j)
            if known is None or known[0] != ptr or known[1].device != p.device:
                known = (ptr, _update_sample(p))
                if p.is_contiguous():
                    self._views[j] = known
            out.append(known[1])
        return out

    def before(self, layout: Layout, ids: list[int]) -> None:
        samples = self._samples(layout, ids)
        reuse = ids == self._ids and all(b.shape == s.shape and b.device == s.device and b.dtype == s.dtype
                                         for b, s in zip(self._buffers, samples))
        self._ids = ids
        with torch.no_grad():
            try:  # one fused copy (into the kept buffers, or new ones)
                if reuse:
                    torch._foreach_copy_(self._buffers, samples)
                else:
                    self._buffers = list(torch._foreach_mul(samples, 1.0))
            except RuntimeError:  # mixed devices, say
                self._buffers = [s.clone() for s in samples]
            self._weight = foreach_norm(self._buffers, 1.0)

    def after(self, layout: Layout, transfer: Transfer, *, keep: bool = False) -> list[int] | None:
        """Queue the sampled ||dW||_1 and ||W||_1 for the next transfer; returns the parameter ids they belong to.
        ``keep``: the next step is sampled too, so the buffers are kept for it (else they are freed)."""
        if self._weight is None:
            return None
        now = self._samples(layout, self._ids)
        with torch.no_grad():
            try:  # before - after, in place: the L1 norm does not care for the sign
                torch._foreach_sub_(self._buffers, now)
            except RuntimeError:
                for b, s in zip(self._buffers, now):
                    b.sub_(s)
            transfer.add("upd_delta", foreach_norm(self._buffers, 1.0))
        transfer.add("upd_weight", self._weight)
        self._weight = None
        ids = self._ids
        if not keep:
            self._buffers, self._ids = [], []
        return ids


def update_ratio(layout: Layout, ids: list[int], delta: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per-module mean|dW| / mean|W| from the sampled L1 sums, each scaled up to its whole parameter."""
    return update_sums(layout, ids, delta, weight)[0]


def update_sums(layout: Layout, ids: list[int], delta: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-module mean|dW| / mean|W|, per-module ||dW||_1): the update each module got, beside its weights."""
    numel = layout.numel[ids]
    stride = np.array([_sample_stride(int(n)) for n in numel], dtype=np.float64)
    scale = numel / -(-numel // stride)  # elements per sampled element
    d = np.zeros(len(layout.params))
    w = np.zeros(len(layout.params))
    d[ids] = delta * scale
    w[ids] = weight * scale
    m = layout.member
    with np.errstate(invalid="ignore", divide="ignore"):
        mask = np.zeros(len(layout.params))
        mask[ids] = 1.0
        covered = m @ mask
        total = m @ d
        return np.where(covered == 0, np.nan, total / (m @ w)), np.where(covered == 0, np.nan, total)
