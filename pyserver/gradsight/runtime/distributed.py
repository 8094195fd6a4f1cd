"""Training under torch.distributed (torchrun): each rank's store, sharded gradients, stopping every rank at once.

- Each rank writes its own store (``run.db``, ``run.rank1.db``, ...) and says its rank in what it prints.
- FSDP2 (``fully_shard``) holds each parameter as a DTensor sharded across the ranks: a rank sees only its
  shard of each gradient. The per-parameter sums (squares for L2 norms, absolute values, non-zero counts) of
  the local shards are summed over the ranks (maxima: their maximum) in one collective per quantity, so every
  rank records the true per-module values, as an unsharded run would.
- A ``--break`` that fires on one rank must stop every rank at the same step (one rank leaving a collective
  makes the others fail with "Connection closed by peer"): when breaks are set, the ranks agree at the end of
  each step, with one tiny all-reduce, on whether any of them stops.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from .layout import is_sharded, local  # noqa: F401  (the helpers distributed code reads)
from .triggers import Fired
from .watches import Action, Watches


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class Distributed:
    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.tag = f" [rank {rank}]" if world > 1 else ""

    @property
    def active(self) -> bool:
        return self.world > 1 and _dist() is not None

    def reduce(self, values: torch.Tensor, how: str, mask: torch.Tensor | None) -> torch.Tensor:
        """Sum (``"sum"``) or maximum (``"max"``) over the ranks of the entries of ``values`` where ``mask``
        (the sharded parameters) is set; the other entries are each rank's own already."""
        dist = _dist()
        if dist is None or mask is None:
            return values
        part = torch.where(mask, values, torch.zeros_like(values))
        if values.device.type == "cpu" and dist.get_backend() == "nccl":  # (NCCL reduces accelerator tensors only)
            part = part.cuda()
        dist.all_reduce(part, op=dist.ReduceOp.MAX if how == "max" else dist.ReduceOp.SUM)
        return torch.where(mask, part.to(values.device), values)

    def agree_to_stop(self, watches: Watches, step: int) -> None:
        """When breaks are set, every rank learns whether one of them stops at this step, and stops with it."""
        dist = _dist()
        if dist is None or self.world < 2 or not watches.has_breaks:
            return
        stopping = any(a.kind == "stop" for a in watches.actions)
        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        code = torch.tensor([self.rank + 1 if stopping else 0], dtype=torch.int64, device=device)
        dist.all_reduce(code, op=dist.ReduceOp.MAX)
        first = int(code.item()) - 1
        if first >= 0 and not stopping:
            watches.actions.append(Action(Fired("break", f"a breakpoint held on rank {first}", condition=f"breakpoint on rank {first}"), "stop"))

    def say(self, text: str) -> None:
        print(f"gradsight{self.tag}: {text}", file=sys.stderr, flush=True)
