"""Deferred reading: a common step's values are copied to the host without waiting, and read a step later.

On an accelerator the copy of a step's gradient norms (and loss) goes into one of two pinned host
buffers with an event recorded after it; the step after, its values have landed and are processed
then, so the host never waits for the device. Triggers still name the step the values belong to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class Pending:
    """A common step whose gradient norms (and loss) are still being copied from the accelerator."""

    step: int
    host: torch.Tensor  # the norms, then the losses: pinned memory, filled by an async copy
    event: Any  # a torch.cuda.Event recorded after the copy (None on the host)
    n: int  # gradient norms in ``host``; the rest are losses
    explicit_loss: float | None
    lr: float | None
    n_backward: int
    zeroed: int | None
    when: float  # perf_counter() when the step was gathered
    wall: float
    clip_limit: float | None = None
    amp_scale: float | None = None
    loss_factor: float = 1.0
    on_host: list[float] = field(default_factory=list)  # loss values read at backward (CPU losses)

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """(norms as float64, losses) once the copy has landed (waits for it when it has not)."""
        if self.event is not None:
            self.event.synchronize()
        host = self.host.numpy().copy()  # the pinned buffer is reused two steps on
        return host[: self.n].astype(np.float64), host[self.n:]


class Ring:
    """Two pinned host buffers with their events, used in turn."""

    def __init__(self) -> None:
        self._slots: list[tuple[torch.Tensor, Any]] = []
        self._next = 0

    def start_copy(self, vec: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """Copy ``vec`` to a host buffer without waiting; returns (buffer, event). A host ``vec`` is its own buffer."""
        if vec.device.type != "cuda":
            return vec, None
        if not self._slots or self._slots[0][0].shape != vec.shape:
            self._slots = [(torch.empty(vec.shape, dtype=torch.float32, pin_memory=True), torch.cuda.Event()) for _ in range(2)]
        host, event = self._slots[self._next]
        self._next = 1 - self._next
        host.copy_(vec, non_blocking=True)
        event.record(torch.cuda.current_stream(vec.device))
        return host, event


def pending(step: int, host: torch.Tensor, event: Any, n: int, *, explicit_loss: float | None, lr: float | None, n_backward: int,
            zeroed: int | None, clip_limit: float | None, amp_scale: float | None, loss_factor: float, on_host: list[float]) -> Pending:
    return Pending(step, host, event, n, explicit_loss, lr, n_backward, zeroed, time.perf_counter(), time.time(), clip_limit, amp_scale,
                   loss_factor, list(on_host))
