"""Global attachment points in PyTorch: no change to the user's script is needed.

- optimizer step pre/post hooks (``torch.optim.optimizer.register_optimizer_step_*_hook``):
  a step is one ``optimizer.step()`` of the primary optimizer;
- ``torch.autograd.backward`` (which ``Tensor.backward`` calls): finds the loss;
- ``Optimizer.zero_grad`` / ``Module.zero_grad``: tells whether gradients are zeroed;
- global module forward (pre-)hooks, only until the root model is found.

Each callback is guarded by the session; the originals are restored on ``remove``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.optim.optimizer as optim_hooks
from torch import nn
from torch.utils.hooks import RemovableHandle


class Listener(Protocol):
    def on_optimizer_pre(self, optimizer: torch.optim.Optimizer) -> None: ...

    def on_optimizer_post(self, optimizer: torch.optim.Optimizer) -> None: ...

    def on_backward_begin(self, tensors: Any) -> None: ...

    def on_backward_end(self) -> None: ...

    def on_zero_grad(self) -> None: ...


class GlobalHooks:
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._handles: list[RemovableHandle] = []
        self._restore: list[Callable[[], None]] = []

    def install(self) -> None:
        lst = self.listener
        optim = optim_hooks
        self._handles.append(optim.register_optimizer_step_pre_hook(lambda opt, a, k: lst.on_optimizer_pre(opt)))
        self._handles.append(optim.register_optimizer_step_post_hook(lambda opt, a, k: lst.on_optimizer_post(opt)))

        original_backward = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            lst.on_backward_begin(tensors)
            result = original_backward(tensors, *args, **kwargs)
            lst.on_backward_end()
            return result

        backward.__wrapped__ = original_backward  # type: ignore[attr-defined,unused-ignore]
        setattr(torch.autograd, "backward", backward)  # noqa: B010
        self._restore.append(lambda: setattr(torch.autograd, "backward", original_backward))

        for cls in (torch.optim.Optimizer, nn.Module):
            self._wrap_zero_grad(cls)

    def _wrap_zero_grad(self, cls: type) -> None:
        original = cls.__dict__["zero_grad"]
        lst = self.listener

        def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
            lst.on_zero_grad()
            return original(self, *args, **kwargs)

        zero_grad.__wrapped__ = original  # type: ignore[attr-defined,unused-ignore]
        setattr(cls, "zero_grad", zero_grad)  # noqa: B010
        self._restore.append(lambda: setattr(cls, "zero_grad", original))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()


class RootFinder:
    """Watches top-level module calls (depth 0) until the root model is chosen."""

    def __init__(self) -> None:
        self.candidates: dict[int, nn.Module] = {}
        self.last_call: dict[int, Any] = {}  # the positional arguments of each candidate's last top-level call
        self.order: list[int] = []  # id(module) in first-call pre-order
        self._seen: set[int] = set()
        self._depth = 0
        self._handles: list[RemovableHandle] = []

    def install(self) -> None:
        reg = torch.nn.modules.module
        self._handles.append(reg.register_module_forward_pre_hook(self._pre))
        self._handles.append(reg.register_module_forward_hook(self._post, always_call=True))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, module: nn.Module, args: Any) -> None:
        if self._depth == 0:
            self.candidates[id(module)] = module
            self.last_call[id(module)] = args  # the global hook sees no keyword arguments
        self._depth += 1
        key = id(module)
        if key not in self._seen:
            self._seen.add(key)
            self.order.append(key)

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)

    def choose(self, wanted: set[int]) -> nn.Module | None:
        """The top-level module owning most of ``wanted`` parameter ids (or the largest one)."""
        best: nn.Module | None = None
        best_key = (0, 0)
        for mod in self.candidates.values():
            ids = {id(p) for p in mod.parameters()}
            if not ids:
                continue
            key = (len(ids & wanted), len(ids))
            if key > best_key:
                best, best_key = mod, key
        if wanted and best is not None and best_key[0] == 0:
            return None
        return best
