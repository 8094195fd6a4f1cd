"""Collection on the device: a step's gradient statistics (and activation rows, and loss) brought to the host.

The common step (not sampled, every parameter has a gradient, nothing else to bring) is one fused
norm, one copy and one matrix product (:func:`common`); on an accelerator the copy can be read a
step later (:mod:`.defer`). Every other step queues what it needs on one :class:`~.gradstats.Transfer`
and copies it once (:func:`general`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from . import gradstats as gs
from .defer import Pending, Ring, pending
from .layout import Layout, local
from .watched import Watched


@dataclass
class Collected:
    """One step's values on the host: what the step-values stage reads."""

    step: int
    sample: gs.GradSample
    mods: dict[str, np.ndarray]
    losses: np.ndarray | None  # the host copy of the step's loss tensors (see losses.StepLoss)
    sampled: bool
    lr: float | None
    zeroed: int | None
    n_backward: int
    when: float
    wall: float
    host: dict[str, np.ndarray] = field(default_factory=dict)
    act_ids: list[tuple[int, int, int, int]] = field(default_factory=list)
    explicit_loss: float | None = None
    loss_factor: float = 1.0  # the losses' mean times this is the step's loss (accumulation: see losses.StepLoss)
    clip_limit: float | None = None
    amp_scale: float | None = None
    skipped: bool = False


def module_values(layout: Layout, l2: np.ndarray) -> dict[str, np.ndarray]:
    """Per-module gradient norms of a step where every parameter has a gradient."""
    norm = gs.module_norms(layout.member, l2)
    norm[layout.no_params] = np.nan
    return {"grad_norm": norm, "grad_present": layout.module_has_params}


def host_losses(fetched: np.ndarray | None, on_host: list[float]) -> np.ndarray | None:
    """The step's loss values on the host: those copied with the step's values and those read at backward."""
    if not on_host:
        return fetched
    known = np.asarray(on_host, dtype=np.float64)
    return known if fetched is None or not len(fetched) else np.concatenate([known, fetched.astype(np.float64)])


def common(layout: Layout, losses: list[torch.Tensor], on_host: list[float], *, defer: bool, ring: Ring, step: int,
           meta: dict[str, object], reduce: gs.Reduce | None = None, norms: dict[int, torch.Tensor] | None = None
           ) -> tuple[gs.GradSample, dict[str, np.ndarray], np.ndarray | None] | Pending | None:
    """The common step: the fused L2 norm of every gradient (and the device losses) in one copy. A :class:`Pending`
    when its reading is deferred; None when the general path is needed (a gradient is missing, say). ``norms``:
    each gradient's L2 norm by id(), taken by ``clip_grad_norm_`` before it scaled them (then not taken again)."""
    if layout.sparse:
        return None
    grads = [p.grad for p in layout.params]
    if not grads:
        return None
    for g in grads:  # (`None in grads` would compare tensors with ==: slow)
        if g is None:
            return None
    sharded = layout.sharded_any and reduce is not None
    if sharded:
        grads = [s if s.numel() else s.new_zeros(1) for s in (local(g) for g in grads)]  # type: ignore[arg-type]
    try:
        taken = [norms.get(id(g)) for g in grads] if norms is not None and not sharded else None
        if taken is not None and all(n is not None for n in taken):
            vec = torch.stack(taken)  # type: ignore[arg-type]
        else:
            vec = torch.stack(torch._foreach_norm(grads))  # type: ignore[arg-type]
    except RuntimeError:  # mixed devices
        return None
    if vec.dtype != torch.float32:
        vec = vec.float()
    if sharded:
        assert reduce is not None
        vec = gs.sharded_l2(vec, torch.as_tensor(layout.sharded, device=vec.device), reduce)
    on_cpu = vec.device.type == "cpu"
    n = len(grads)
    if losses:  # (a CPU loss was read at backward: only an accelerator's comes here)
        if any(t.device != vec.device for t in losses):
            return None
        loss_vec = (losses[0].reshape(1) if len(losses) == 1 else torch.stack([t.reshape(()) for t in losses])).to(torch.float32)
        vec = torch.cat([vec, loss_vec])  # one copy to the host for both
    if defer:
        host, event = ring.start_copy(vec)
        return pending(step, host, event, n, on_host=on_host, **meta)  # type: ignore[arg-type]
    flat = vec.numpy() if on_cpu else vec.cpu().numpy()
    l2 = flat[:n].astype(np.float64)  # (squares of norms beyond 1.8e19 overflow float32)
    return gs.GradSample(layout.all_params, True, l2), module_values(layout, l2), host_losses(flat[n:] if losses else None, on_host)


def general(w: Watched, transfer: gs.Transfer, losses: list[torch.Tensor], on_host: list[float], *, sampled: bool,
            prebw: torch.Tensor | None, reduce: gs.Reduce | None = None,
            input_stats: torch.Tensor | None, keep_work_space: bool) -> tuple[gs.GradSample, dict[str, np.ndarray], dict[str, np.ndarray],
                                                                               list[tuple[int, int, int, int]]]:
    """Every other step: gradients (finer statistics when sampled), activation rows, input statistics,
    the losses and the pre-backward norm of stale gradients, all in one copy per device."""
    layout = w.layout
    if len(losses) == 1:
        transfer.add("loss", losses[0])
    elif losses:
        transfer.add("loss", [x.float().reshape(()) for x in losses])
    if prebw is not None:
        transfer.add("prebw", [prebw])
    idx = gs.queue_grads(layout, transfer, sampled, reduce)
    if input_stats is not None:
        transfer.add("input", input_stats)
    act_ids: list[tuple[int, int, int, int]] = []
    rec = w.recorder
    if rec.armed or rec.rows:
        rec.disarm(keep_work_space=keep_work_space)
        act_ids = rec.take(transfer.add)
    host = transfer.fetch()
    loss = host_losses(host.get("loss"), on_host)
    if loss is not None:
        host["loss"] = loss
    sample = gs.read_grads(layout, host, idx)
    mods = gs.per_module(layout, sample)
    mods["grad_present"] = layout.module_has_params if sample.all_present else layout.member @ sample.present.astype(np.float64)
    return sample, mods, host, act_ids


def from_pending(layout: Layout, p: Pending) -> Collected:
    l2, fetched = p.values()
    losses = host_losses(fetched if len(fetched) else None, p.on_host)
    return Collected(p.step, gs.GradSample(layout.all_params, True, l2), module_values(layout, l2), losses,
                     False, p.lr, p.zeroed, p.n_backward, p.when, p.wall, explicit_loss=p.explicit_loss, loss_factor=p.loss_factor,
                     clip_limit=p.clip_limit, amp_scale=p.amp_scale)


def now() -> tuple[float, float]:
    return time.perf_counter(), time.time()
