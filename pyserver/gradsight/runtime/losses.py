"""A step's loss as the user's own code would report it: the mean of its micro-batches' losses, unscaled.

Each ``backward()`` of a step brings one micro-batch's loss. Gradient accumulation divides each by
the number of micro-batches (``loss / accum``): when every backward tensor of a step of ``n``
backward calls is a constant division by ``n`` (or a multiplication by ``1/n``), read off the
graph node that made it, the step's loss is their mean times ``n`` (the numerators' mean). A
``GradScaler`` multiplies the loss before ``backward()``: the tensor it was given is the loss.
A closure optimizer's step (LBFGS, Lightning) reports the loss its first closure call returned; ``gradsight.log(loss=...)`` overrides all of these.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

ACCUMULATION_TOLERANCE = 1e-3  # |divisor - n| / n below which a division is the accumulation's


def _constant(t: Any) -> float | None:
    """The value of a 0-d constant saved on a graph node (a Python number PyTorch wrapped), else None.
    Only host tensors are read: reading one on an accelerator would wait for it."""
    if isinstance(t, torch.Tensor) and t.dim() == 0 and not t.requires_grad and t.device.type == "cpu":
        return float(t)
    return None


def divisor(loss: torch.Tensor) -> float | None:
    """``c`` when ``loss`` is ``x / c`` or ``x * (1 / c)`` for a constant ``c`` (a Python number)."""
    node = loss.grad_fn
    if node is None:
        return None
    name = type(node).__name__
    if name not in ("DivBackward0", "MulBackward0"):
        return None
    try:
        other = _constant(getattr(node, "_saved_other"))  # noqa: B009
    except (AttributeError, RuntimeError):  # not saved (or already freed)
        return None
    if other is None or other == 0:
        return None
    return other if name == "DivBackward0" else 1.0 / other


class StepLoss:
    """The backward tensors of the current step, and what replaces them."""

    def __init__(self) -> None:
        # what was back-propagated (unscaled): its value on the host already for a CPU loss (one read, which the
        # step needs anyway), else the detached tensor, brought over with the step's other values
        self.values: list[float | torch.Tensor] = []
        self.divisors: list[float | None] = []  # and the constant it was divided by, if any
        self.closure: torch.Tensor | float | None = None  # the first closure result of a closure step
        self.explicit: float | None = None  # gradsight.log(loss=...)
        self.scale: torch.Tensor | None = None  # the GradScaler's scale of this step's backward
        # the last few GradScaler.scale() results (weakly: tensors compare element-wise, so no weak dict)
        self._scaled: list[tuple[weakref.ref[torch.Tensor], torch.Tensor, torch.Tensor]] = []

    def scaled(self, loss: Any, scaled: Any, scale: Any) -> None:
        """``GradScaler.scale(loss)`` returned ``scaled``: a backward of it is a backward of ``loss``."""
        if isinstance(loss, torch.Tensor) and isinstance(scaled, torch.Tensor) and isinstance(scale, torch.Tensor):
            self._scaled = [(weakref.ref(scaled), loss, scale), *self._scaled[:3]]

    def _unscaled(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        for ref, loss, scale in self._scaled:
            if ref() is t:
                return loss, scale
        return None

    def backward(self, tensors: Any) -> None:
        if not isinstance(tensors, torch.Tensor) or tensors.numel() != 1:
            return
        loss = tensors
        known = self._unscaled(loss)
        if known is not None:
            loss, self.scale = known
        detached = loss.detach()
        on_host = detached.device.type == "cpu" and detached.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16)
        self.values.append(float(detached) if on_host else detached)
        self.divisors.append(divisor(loss))

    def close_over(self, result: Any) -> None:
        if self.closure is None and isinstance(result, (torch.Tensor, float, int)) and not isinstance(result, bool):
            if not isinstance(result, torch.Tensor) or result.numel() == 1:
                self.closure = result.detach() if isinstance(result, torch.Tensor) else float(result)

    @property
    def n(self) -> int:
        return len(self.values)

    def split(self) -> tuple[list[torch.Tensor], list[float]]:
        """(tensors to bring to the host, values on it already): their mean times :meth:`factor` is the step's loss."""
        chosen: list[float | torch.Tensor] = [self.closure] if isinstance(self.closure, torch.Tensor) else self.values
        return [v for v in chosen if isinstance(v, torch.Tensor)], [v for v in chosen if not isinstance(v, torch.Tensor)]

    def last(self) -> float | torch.Tensor | None:
        return self.values[-1] if self.values else None

    def factor(self) -> float:
        """``n`` when each of the step's ``n`` backward tensors was divided by ``n`` (accumulation), else 1."""
        n = len(self.values)
        if self.closure is None and n > 1 and all(d is not None and abs(d - n) <= ACCUMULATION_TOLERANCE * n for d in self.divisors):
            return float(n)
        return 1.0

    def reset(self) -> None:
        self.values, self.divisors = [], []
        self.closure = None
        self.explicit = None
        self.scale = None
        self._scaled = []
