"""Global attachment points in PyTorch: no change to the user's script is needed, nothing is put on a model.

- ``Optimizer.__init__``: an optimizer exists, so backward calls are micro-batches of its steps;
- optimizer step pre/post hooks (``torch.optim.optimizer.register_optimizer_step_*_hook``): a step is
  one ``optimizer.step()``; a closure passed to it (LBFGS, Lightning) is wrapped so that the step is
  read when the closure returns: gradients ready, weights not yet updated;
- ``torch.autograd.backward`` (which ``Tensor.backward`` calls): the loss of each micro-batch;
- ``Optimizer.zero_grad`` / ``Module.zero_grad``: whether gradients are zeroed;
- ``clip_grad_norm_`` / ``clip_grad_value_`` / ``clip_grads_with_norm_``: gradients are read before they are clipped;
- ``GradScaler.scale`` / ``GradScaler.step``: the unscaled loss, and steps the scaler skips;
- global module forward hooks: the root model's candidates until it is chosen, then its inputs.

Each callback is guarded by the session; the originals are restored on ``remove``. Only global
registries and class attributes are touched: a model or optimizer carries nothing of gradsight's,
so it can still be deep-copied, pickled, saved and wrapped.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.optim.optimizer as optim_hooks
from torch import nn
from torch.utils.hooks import RemovableHandle

from .layout import first_tensor
from .nanorigin import Tags


class Listener(Protocol):
    def on_optimizer_created(self, optimizer: torch.optim.Optimizer) -> None: ...

    def on_optimizer_pre(self, optimizer: torch.optim.Optimizer, has_closure: bool) -> bool: ...

    def on_closure_end(self, optimizer: torch.optim.Optimizer, result: Any) -> None: ...

    def on_optimizer_post(self, optimizer: torch.optim.Optimizer) -> None: ...

    def on_backward_begin(self, tensors: Any) -> None: ...

    def on_backward_end(self) -> None: ...

    def on_zero_grad(self) -> None: ...

    def on_clip(self, parameters: list[torch.Tensor], how: str, limit: float | None, shareable: bool = False) -> bool: ...

    def on_clip_norms(self, parameters: list[torch.Tensor], norms: dict[int, torch.Tensor], total: Any) -> None: ...

    def on_scaled(self, scaler: Any, loss: Any, scaled: Any) -> None: ...

    def on_scaler_step(self, scaler: Any, optimizer: torch.optim.Optimizer, stepped: bool) -> None: ...


_CLIP_FUNCTIONS = (("clip_grad_norm_", "norm"), ("clip_grad_value_", "value"), ("clip_grads_with_norm_", "norm"))


def _limit(how: str, args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> float | None:
    """The max_norm / clip_value of a clipping call (a number or a 0-d tensor), None when not plain."""
    key = "max_norm" if how == "norm" else "clip_value"
    value = kwargs.get(key, args[0] if args else None)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError, RuntimeError):
        return None


def _l2_foreach(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)`` call takes L2 norms
    by ``torch._foreach_norm`` (its default): then they are the per-gradient norms gradsight takes."""
    norm_type = args[1] if len(args) > 1 else kwargs.get("norm_type", 2.0)
    foreach = args[3] if len(args) > 3 else kwargs.get("foreach")
    try:
        return float(norm_type) == 2.0 and foreach is not False
    except (TypeError, ValueError):
        return False


class NormTap:
    """While open, every ``torch._foreach_norm`` call of L2 norms passes through unchanged, and each norm it returns
    is kept by id() of its tensor (``clip_grad_norm_`` looks the function up on ``torch`` at each call)."""

    def __init__(self) -> None:
        self.norms: dict[int, torch.Tensor] = {}
        self._original: Callable[..., Any] | None = None

    def __enter__(self) -> NormTap:
        original = self._original = torch._foreach_norm
        norms = self.norms

        def _foreach_norm(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(tensors, *args, **kwargs)
            ord_ = args[0] if args else kwargs.get("ord", 2)
            if not kwargs.get("dtype") and len(args) < 2 and isinstance(ord_, (int, float)) and float(ord_) == 2.0:
                for t, n in zip(tensors, out):
                    norms[id(t)] = n
            return out

        functools.update_wrapper(_foreach_norm, original)
        torch._foreach_norm = _foreach_norm  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        torch._foreach_norm = self._original  # type: ignore[assignment]


class GlobalHooks:
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._handles: list[RemovableHandle] = []
        self._restore: list[Callable[[], None]] = []

    def install(self) -> None:
        optim = optim_hooks
        self._handles.append(optim.register_optimizer_step_pre_hook(self._step_pre))
        self._handles.append(optim.register_optimizer_step_post_hook(self._step_post))
        self._wrap_init()
        self._wrap_backward()
        for cls in (torch.optim.Optimizer, nn.Module):
            self._wrap_zero_grad(cls)
        self._wrap_clipping()
        self._wrap_scaler()

    def _step_pre(self, opt: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """Before ``opt.step(...)``; a closure is wrapped so the step is read when it first returns.
        (``args`` starts with the optimizer itself.)"""
        if len(args) > 1 and callable(args[1]):
            closure, where = args[1], "args"
        elif callable(kwargs.get("closure")):
            closure, where = kwargs["closure"], "kwargs"
        else:
            self.listener.on_optimizer_pre(opt, False)
            return None
        if not self.listener.on_optimizer_pre(opt, True):
            return None
        lst = self.listener

        @functools.wraps(closure)
        def wrapped(*c_args: Any, **c_kwargs: Any) -> Any:
            result = closure(*c_args, **c_kwargs)
            lst.on_closure_end(opt, result)
            return result

        if where == "args":
            return (args[0], wrapped, *args[2:]), kwargs
        return args, {**kwargs, "closure": wrapped}

    def _step_post(self, opt: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            _STEPS[opt] = _STEPS.get(opt, 0) + 1
        except TypeError:  # not weak-referenceable
            pass
        self.listener.on_optimizer_post(opt)

    def _wrap_init(self) -> None:
        cls = torch.optim.Optimizer
        original = cls.__dict__["__init__"]
        lst = self.listener

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            lst.on_optimizer_created(self)

        functools.update_wrapper(__init__, original)
        setattr(cls, "__init__", __init__)  # noqa: B010
        self._restore.append(lambda: setattr(cls, "__init__", original))

    def _wrap_backward(self) -> None:
        original_backward = torch.autograd.backward
        lst = self.listener

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            lst.on_backward_begin(tensors)
            result = original_backward(tensors, *args, **kwargs)
            lst.on_backward_end()
            return result

        functools.update_wrapper(backward, original_backward)
        setattr(torch.autograd, "backward", backward)  # noqa: B010
        self._restore.append(lambda: setattr(torch.autograd, "backward", original_backward))

    def _wrap_zero_grad(self, cls: type) -> None:
        original = cls.__dict__["zero_grad"]
        lst = self.listener

        def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
            lst.on_zero_grad()
            return original(self, *args, **kwargs)

        functools.update_wrapper(zero_grad, original)
        setattr(cls, "zero_grad", zero_grad)  # noqa: B010
        self._restore.append(lambda: setattr(cls, "zero_grad", original))

    def _wrap_clipping(self) -> None:
        """The clipping functions, where users and frameworks look them up (``torch.nn.utils.X`` and
        ``torch.nn.utils.clip_grad.X``): the listener reads the gradients before they change."""
        import torch.nn.utils as utils
        import torch.nn.utils.clip_grad as clip_module

        lst = self.listener
        for name, how in _CLIP_FUNCTIONS:
            original = getattr(clip_module, name, None)
            if original is None:
                continue

            def make(original: Callable[..., Any], how: str, name: str) -> Callable[..., Any]:
                def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
                    if isinstance(parameters, torch.Tensor):
                        params = [parameters]
                        passed: Any = parameters
                    else:
                        # a generator is read once, here: the original gets the same items, as a generator again
                        params = list(parameters)
                        passed = (p for p in params) if isinstance(parameters, types.GeneratorType) else params
                    share = name == "clip_grad_norm_" and _l2_foreach(args, kwargs) and not _is_compiling()
                    if not lst.on_clip(params, how, _limit(how, args, kwargs, name), share):
                        return original(passed, *args, **kwargs)
                    # the listener reads the gradients' norms that clipping computes anyway (one pass over them, not two)
                    with NormTap() as tap:
                        total = original(passed, *args, **kwargs)
                    lst.on_clip_norms(params, tap.norms, total)
                    return total

                functools.update_wrapper(clip, original)
                return clip

            wrapper = make(original, how, name)
            for owner in (clip_module, utils):
                if getattr(owner, name, None) is original:
                    setattr(owner, name, wrapper)
                    self._restore.append(functools.partial(setattr, owner, name, original))

    def _wrap_scaler(self) -> None:
        try:
            from torch.amp.grad_scaler import GradScaler
        except ImportError:  # pragma: no cover - every supported torch has it
            return
        lst = self.listener
        scale_original = GradScaler.__dict__["scale"]
        step_original = GradScaler.__dict__["step"]

        def scale(self: Any, outputs: Any) -> Any:
            scaled = scale_original(self, outputs)
            lst.on_scaled(self, outputs, scaled)
            return scaled

        def step(self: Any, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            before = step_count(optimizer)
            result = step_original(self, optimizer, *args, **kwargs)
            lst.on_scaler_step(self, optimizer, step_count(optimizer) != before)
            return result

        functools.update_wrapper(scale, scale_original)
        functools.update_wrapper(step, step_original)
        setattr(GradScaler, "scale", scale)  # noqa: B010
        setattr(GradScaler, "step", step)  # noqa: B010
        self._restore.append(lambda: setattr(GradScaler, "scale", scale_original))
        self._restore.append(lambda: setattr(GradScaler, "step", step_original))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()


# optimizer -> steps taken (the post hook counts them): tells a step GradScaler skipped from one it took
_STEPS: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = weakref.WeakKeyDictionary()


def step_count(optimizer: torch.optim.Optimizer) -> int:
    try:
        return _STEPS.get(optimizer, 0)
    except TypeError:  # not weak-referenceable
        return 0


MAX_CANDIDATES = 16  # top-level modules remembered as candidates for a model


# True while torch.compile (Dynamo) traces: gradsight's module hooks then do nothing, so that they add no graph
# break and nothing to the compiled graph (a compiled model's inner modules are not measured). Looked up once:
# the hooks ask at every module call.
_is_compiling = torch.compiler.is_compiling


class ForwardWatch:
    """PyTorch's global module forward hooks, registered once for the whole session (the set of global hooks
    never changes while training runs: torch.compile guards on it). They follow top-level calls (depth 0), the
    candidates for a model, and the calls of each chosen model (its inputs, keyword arguments too), whatever wraps
    it. Every module output's graph node is marked (``on_output``), and armed activation recorders measure."""

    def __init__(self, on_root_call: Callable[[Any, tuple[Any, ...], dict[str, Any]], None], tags: Tags | None = None) -> None:
        # the last few top-level modules called (bounded: a loss module made anew at every step must not pile up)
        self.candidates: OrderedDict[int, nn.Module] = OrderedDict()
        self.last_call: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}  # each candidate's last top-level call
        self.order: list[int] = []  # id(module) in first-call pre-order
        self._seen: set[int] = set()
        self._depth = 0
        self._handles: list[RemovableHandle] = []
        self._roots: dict[int, Any] = {}  # id() of each chosen model (and of what wraps it: DDP, torch.compile) -> its tag
        self._on_root_call = on_root_call
        self.tags = tags  # each module output's graph node is held there, and a top-level call starts a new forward
        self.on_output: Callable[[nn.Module, Any], None] | None = None  # each module call's output, while set
        self.recorders: list[Any] = []  # the ActivationRecorder of each chosen model, armed or not
        self.tracking = False  # keep the stack of running modules (on measured steps, for observations)
        self.stack: list[nn.Module] = []
        self.top_args: tuple[Any, ...] = ()  # while tracking: the positional arguments of the running top-level call
        self.on_start: Callable[[nn.Module, Any], None] | None = None  # while tracking: each module call's start

    def install(self) -> None:
        if self._handles:
            return
        reg = torch.nn.modules.module
        self._handles.append(reg.register_module_forward_pre_hook(self._pre))
        self._handles.append(reg.register_module_forward_hook(self._post, with_kwargs=True, always_call=True))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def follow(self, tag: Any, recorder: Any, *modules: nn.Module) -> None:
        """A model is chosen: its calls are reported with ``tag`` (an identity test a module call)."""
        for m in modules:
            self._roots[id(m)] = tag
        self.recorders.append(recorder)
        for m in modules:
            self.candidates.pop(id(m), None)
            self.last_call.pop(id(m), None)
        self.install()

    def _pre(self, module: nn.Module, args: Any) -> None:
        if _is_compiling():  # inside a graph torch.compile traces: nothing of gradsight's may enter it
            return
        for rec in self.recorders:
            if rec.want_order:
                rec.note_call(module, args)
        if self.tracking:
            self.stack.append(module)
            if self._depth == 0:
                self.top_args = args
            if self.on_start is not None:
                self.on_start(module, args)
        if self._depth == 0 and self.tags is not None:
            self.tags.top_call()
        self._depth += 1
        if not self._roots:  # (the first model's forward order: until it is chosen)
            key = id(module)
            if key not in self._seen:
                self._seen.add(key)
                self.order.append(key)

    def _post(self, module: nn.Module, args: Any, *rest: Any) -> None:
        """(module, args, kwargs, output); when the forward raised, PyTorch calls it as (module, args, output).
        It runs for every module call of every step: the ordinary step's path is kept to a few attribute reads."""
        if _is_compiling():
            return
        output = rest[-1] if rest else None
        if self.tracking and self.stack:
            while self.stack and self.stack.pop() is not module:
                pass
        tags = self.tags
        if tags is not None:  # the output's graph node, for where a non-finite loss started
            fn = getattr(output if isinstance(output, torch.Tensor) else first_tensor(output), "grad_fn", None)
            if fn is not None:
                tags.hold(fn, id(module))
        if self.on_output is not None:
            self.on_output(module, output)
        self._depth = self._depth - 1 if self._depth > 0 else 0
        tag = self._roots.get(id(module))
        if tag is not None:
            self._on_root_call(tag, args, rest[0] if len(rest) == 2 else {})
        elif self._depth == 0:
            key = id(module)
            self.candidates[key] = module
            self.candidates.move_to_end(key)
            self.last_call[key] = (args, rest[0] if len(rest) == 2 else {})
            if len(self.candidates) > MAX_CANDIDATES:
                old, _ = self.candidates.popitem(last=False)
                self.last_call.pop(old, None)
        for rec in self.recorders:
            if rec.armed:
                rec.measure(module, args, output)

    def largest(self, exclude: set[int]) -> nn.Module | None:
        """The top-level module called so far with the most parameters (none of ``exclude``)."""
        best, size = None, 0
        for mod in self.candidates.values():
            n = sum(1 for p in mod.parameters() if id(p) not in exclude)
            if n > size:
                best, size = mod, n
        return best

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


def unwrap(module: nn.Module) -> nn.Module:
    """The user's model inside the wrappers that training adds (DistributedDataParallel, DataParallel,
    torch.compile's OptimizedModule): its module names are the user's, without ``module.`` or ``_orig_mod.``."""
    if isinstance(module, weakref.ProxyTypes):  # (Lightning hands its module out as a weakref.proxy)
        real = getattr(getattr(module, "__init__", None), "__self__", None)  # a method through a proxy is bound to the module
        if isinstance(real, nn.Module):
            module = real
    for _ in range(8):
        inner = getattr(module, "_orig_mod", None) if type(module).__name__ == "OptimizedModule" else None
        if inner is None and type(module).__name__ in ("DistributedDataParallel", "DataParallel"):
            inner = getattr(module, "module", None)
        if not isinstance(inner, nn.Module):
            return module
        module = inner
    return module
