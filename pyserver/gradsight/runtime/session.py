"""A watching session: the root model, its optimizers, a run store, triggers.

A step is one ``optimizer.step()`` of the primary (first seen stepping) optimizer, however many
backward calls it took; with a closure (LBFGS, Lightning) the step is read when the closure first
returns. Once the step's gradients are ready and before the weights change (or, with clipping,
before the gradients are clipped) a step runs as four calls:

    collect on the device  ->  step values  ->  triggers and watches  ->  record (and capture)

After the optimizer has stepped the step is complete: the session then pauses in the user's frame
(debugger) or stops the run (``--break`` with no debugger) if a breakpoint asked for it.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .. import __version__
from ..conditions import Condition
from ..store import EVENT_ORIGIN, EVENT_SKIPPED, EVENT_TRIGGER, EVENT_WARNING, NEVER_STEPPED, UNREGISTERED, StepRow, StoreWriter, prepare_output
from ..store.paths import prepare_rank_output
from ..thresholds import Thresholds
from . import collect as col
from . import gradstats as gs
from . import nanorigin
from . import owntime as ot
from .activations import FIELDS as ACTIVATION_FIELDS
from .activations import fit
from .capture import CAPTURE_MODULES, INPUT_BYTES, Inputs, capture, host_array, interesting, worst_modules
from .collect import Collected
from .defer import Pending, Ring
from .distributed import Distributed
from .hooks import ForwardWatch, GlobalHooks, step_count, unwrap
from .layout import first_tensor, local
from .losses import StepLoss
from .observe import Observer, mask_stats
from .pause import user_frame
from .triggers import BUILTIN, Fired, History
from .unregistered import advice, find_unregistered
from .values import global_norms, loss_of, nonfinite_counts, step_values
from .watched import Watched, is_leaf, prefixed
from .watches import GradsightStop, StepLimit, Watches

__all__ = ["ACTIVE", "DEFAULT_CAPTURE_BYTES", "DEFAULT_CAPTURE_WINDOW", "DEFAULT_EVERY", "GradsightStop", "Session", "Settings",
           "StepLimit"]

# A sampled step (activation statistics of every module, update ratio) costs 0.25-0.6x
# a plain step in gradsight's own time (benchmarks/step_costs.py); one step in 100 keeps
# that under 1%.
DEFAULT_EVERY = 100
DEFAULT_CAPTURE_WINDOW = 5
DEFAULT_CAPTURE_BYTES = 64 * 2**20
LOSS_SCALE_STEPS = 10  # the run's loss scale is the median of its first losses
HISTORY_STEPS = 64  # steps of values kept for triggers and conditions (more when a window asks for it)
BASELINE_BYTES = 4 * 2**20  # the activations of one ordinary step, kept to compare an anomaly with
ACTIVE: Session | None = None


@dataclass
class Settings:
    triggers: tuple[str, ...] = BUILTIN
    conditions: tuple[Condition, ...] = ()
    breaks: tuple[Condition, ...] = ()
    every: int = DEFAULT_EVERY
    capture_window: int = DEFAULT_CAPTURE_WINDOW
    capture_bytes: int = DEFAULT_CAPTURE_BYTES
    thresholds: Thresholds = field(default_factory=Thresholds)
    # Read a step's gradient norms one step later, so the host never waits for the accelerator
    # (None: on CUDA). Triggers still report the right step; breakpoints and watches keep it off.
    defer: bool | None = None
    max_steps: int | None = None  # end the run (exit status 0) after this many steps

    def validate(self) -> None:
        if self.every < 1:
            raise ValueError(f"every must be at least 1, got {self.every}")
        if self.capture_window < 0:
            raise ValueError(f"capture_window must be at least 0, got {self.capture_window}")
        if self.capture_bytes < 0:
            raise ValueError(f"capture_bytes must be at least 0, got {self.capture_bytes}")

    def as_json(self) -> dict[str, Any]:
        return {
            "triggers": list(self.triggers),
            "conditions": [c.text for c in self.conditions],
            "breaks": [c.text for c in self.breaks],
            "every": self.every,
            "capture_window": self.capture_window,
            "capture_bytes": self.capture_bytes,
            "thresholds": self.thresholds.__dict__,
            "defer": self.defer,
        }


def distributed_identity() -> tuple[int, int, str | None]:
    """(rank, world size, the run's group id) from torchrun's environment; the group id names the run that
    the ranks' sibling stores belong to (None for one process)."""
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return rank, world, None
    env = os.environ
    group = ":".join([env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""), env.get("TORCHELASTIC_RUN_ID", ""),
                      str(os.getppid()) if env.get("TORCHELASTIC_RUN_ID") else env.get("GROUP_RANK", "")])
    return rank, world, group


class Session:
    closed: bool = False

    def __init__(self, store: str | os.PathLike[str], *, model: nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, settings: Settings | None = None,
                 script: str | None = None, argv: list[str] | None = None,
                 progress: Callable[[Session], None] | None = None, overwrite: bool = False) -> None:
        global ACTIVE
        if ACTIVE is not None and not ACTIVE.closed:
            raise RuntimeError("gradsight is already watching a model in this process; close that handle first")
        self.settings = settings or Settings()
        self.settings.validate()
        rank, world, group = distributed_identity()
        self.rank, self.world_size = rank, world
        protect = [script] if script else []
        self.store_path = (prepare_output(store, overwrite=overwrite, protect=protect) if group is None
                           else prepare_rank_output(store, rank, group, overwrite=overwrite, protect=protect))
        self.writer = StoreWriter(self.store_path, {
            "script": script, "argv": argv if argv is not None else list(sys.argv), "cwd": os.getcwd(),
            "started": time.time(), "status": "running", "torch_version": torch.__version__,
            "gradsight_version": __version__, "python_version": platform.python_version(),
            "device": None, "rank": rank, "world_size": world, "pid": os.getpid(),
            "settings": self.settings.as_json(), "loss_source": "backward", "run_group": group,
        })
        self.progress = progress
        self.closed = False
        self.step = 0
        self.anomalies: list[tuple[int, str]] = []
        self.models: list[Watched] = []
        self._clock: Watched | None = None  # the model of the primary optimizer: its steps are the run's steps
        self._model_of: weakref.WeakKeyDictionary[torch.optim.Optimizer, Watched] = weakref.WeakKeyDictionary()
        self._index: dict[int, int] = {}  # id() of every watched module -> its id in the store
        self._leaves: set[int] = set()  # store ids of the modules without children
        self._rank_of: dict[int, int] = {}  # store module id -> its place in the forward pass
        self.watches = Watches(self.settings.breaks)
        self.dist = Distributed(rank, world)
        # the current step (of whichever watched model is stepping)
        self.loss = StepLoss()
        self._n_backward = 0
        self._zeroed: bool | None = None
        self._prebw: torch.Tensor | None = None  # norm of the gradients found before the step's first backward
        self._input_stats: torch.Tensor | None = None
        self._input_arg: int | str | None = None  # the model argument the input statistics are of
        self._mask_step = -1  # the measured step whose attention_mask was looked at
        self._stepping: tuple[torch.optim.Optimizer, Watched | None, bool] | None = None  # (optimizer, its model, is it the primary)
        self._step_open = False  # the stepping model's values are collected (its step has begun)
        self._closure_step = False  # the stepping model is read when its closure returns
        self._stash: tuple[Watched, Collected | Pending] | None = None  # values collected before the gradients were clipped
        self._clip_limit: float | None = None
        self._clip_value: float | None = None
        self._skipped = False
        self._nan_origin: int | None = None  # where this step's non-finite loss came from (nanorigin)
        self._sharing: tuple[Watched, bool] | None = None  # a clip_grad_norm_ call whose norms are the step's (on_clip_norms)
        self._probe: nanorigin.BackwardProbe | None = None  # a step whose backward is watched for where inf/NaN is made
        # the run
        self._primary: weakref.ReferenceType[torch.optim.Optimizer] | None = None
        self._since_primary: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # others stepped since the primary did
        self._optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self._optimizer_seen = optimizer is not None  # one exists: backward calls are its steps' micro-batches
        self._created: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # optimizers made since the session began
        self._later_phase: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # made after the first steps
        self._searched = False  # the process's objects were searched for a model (once)
        self._optimizers_written: list[dict[str, Any]] = []
        self._inputs_written: list[tuple[int, int, int]] = []  # (step, ...) of inputs kept beside activations
        self._baseline = False  # the activations of one ordinary measured step were kept (to compare an anomaly with)
        self._auto_steps = False  # no optimizer at all: each backward ends a step
        self._backwards_seen = 0  # backward() calls over the whole run
        self._explicit_steps = False  # the user ends steps with mark_step()
        self._transfer = gs.Transfer()
        self._upd_ids: list[int] | None = None
        self._upd_step = -1
        self._capture_until = -1
        self._capture_acts: tuple[Watched, set[int], int] | None = None  # modules (and bytes) to capture from the next forward
        self._extra_sample = -1  # a step measured in full because the model was found after step 0's forward
        self._errors: set[str] = set()
        self._broken = False
        self._last_time = time.perf_counter()
        self.own = ot.OwnTime(lambda: sum(w.recorder.spent for w in self.models))
        self._pending: Pending | None = None
        self._in_step = False  # deferral turned off for good (a debugger condition reads the history)
        self._ring = Ring()
        self._warned_unstepped = False
        self._loss_start: list[float] = []  # the first losses: the run's scale
        self._loss_scale = math.nan
        self._tags = nanorigin.Tags()  # module outputs' graph nodes, for where a non-finite loss started
        self._forward = ForwardWatch(self._on_root_call, self._tags)
        self._hooks = GlobalHooks(self)
        self._hooks.install()
        self.observer = Observer(self._current_module, lambda: type(self._forward.stack[-1]).__name__ if self._forward.stack else "",
                                 lambda: self._forward.top_args)
        self._forward.on_start = lambda module, args: self.observer.fed(self._index.get(id(module)), args)
        self.observer.install()
        self._maps_kept = False  # attention maps kept once (the first measured step), and again at a capture
        ACTIVE = self
        if optimizer is not None:
            self._register_optimizer(optimizer)
        self._forward.install()
        if model is not None:
            self._adopt(model)

    # -- public ----------------------------------------------------------------
    @property
    def watched(self) -> Watched | None:
        """The model whose optimizer's steps are the run's steps (the first watched, until then)."""
        return self._clock or (self.models[0] if self.models else None)

    @property
    def history(self) -> History | None:
        w = self.watched
        return w.history if w is not None else None

    @property
    def layout(self) -> Any:
        w = self.watched
        return w.layout if w is not None else None

    @property
    def inputs(self) -> Inputs:
        w = self.watched
        return w.inputs if w is not None else Inputs(1, 0)

    def log(self, loss: float | torch.Tensor | None = None) -> None:
        """Tell the session this step's loss (overrides the one found at ``backward``)."""
        if loss is not None:
            self.loss.explicit = float(loss.detach().float().mean()) if isinstance(loss, torch.Tensor) else float(loss)
            self.writer.update_run(loss_source="explicit")

    def current_loss(self) -> float | None:
        """The loss of the step in progress so far (host read), for a breakpoint condition."""
        if self.loss.explicit is not None:
            return self.loss.explicit
        tensors, on_host = self.loss.split()
        values = [float(t) for t in tensors] + on_host
        return float(np.mean(values)) * self.loss.factor() if values else None

    def mark_step(self) -> None:
        """End a step by hand (for training loops without a torch optimizer)."""
        self._explicit_steps = True
        w = self.watched
        self._guard("step", lambda: self._begin(w, True))
        self._guard("step", lambda: self._end(w, True))
        self._run_actions()

    def join(self, model: nn.Module, optimizer: torch.optim.Optimizer | None, breaks: tuple[Condition, ...]) -> None:
        """``gradsight.watch(...)`` called while this session runs (a traced script that watches itself)."""
        if optimizer is not None:
            self._optimizer_seen = True
            self._guard("optimizer", lambda: self._register_optimizer(optimizer))
        if not any(w.root is unwrap(model) for w in self.models) and (optimizer is None or self._model_of.get(optimizer) is None):
            self._guard("step", lambda: self._adopt(model))
        self.watches.add_breaks(breaks)

    def stay_in_step(self) -> None:
        """Process every step before the next one runs from now on (a breakpoint condition
        evaluated in the user's frame reads this run's history), and what is pending now."""
        self._in_step = True
        self._finish_pending()

    def own_share(self) -> float | None:
        return self.own.share()

    def close(self, status: str = "finished") -> None:
        global ACTIVE
        if self.closed:
            return
        self._finish_pending()
        self._guard("step", lambda: self._write_updates(self._transfer.fetch()))  # the last sampled step's
        stepped = any(step_count(o) for o in self._optimizers)  # (the optimizer's own count: gradsight may have failed)
        if self.step == 0 and self._backwards_seen and self._optimizer_seen and not stepped and not self._broken:
            # backward() ran, an optimizer exists, and it never stepped (an accumulation condition never met, a
            # step() that is never reached): no step was recorded, and that is the finding
            self.writer.put_event(None, EVENT_WARNING, NEVER_STEPPED, value=float(self._backwards_seen), message=(
                f"backward() ran {self._backwards_seen} times, but the optimizer never stepped: no parameter was ever updated"))
        self.own.close()
        self.closed = True
        self._hooks.remove()
        self.observer.remove()
        self._forward.remove()
        self._tags.clear()
        for w in self.models:
            w.recorder.disarm()
        self.writer.update_run(status=status, ended=time.time())
        self.writer.close()
        if ACTIVE is self:
            ACTIVE = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close("finished" if exc_type is None else "crashed")

    # -- listener callbacks (see hooks.py) --------------------------------------
    def on_optimizer_created(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer_seen = True
        self._created.add(optimizer)
        if self._primary is not None and self.step > 0:  # made after the run's steps began: a later training phase
            self._later_phase.add(optimizer)

    def on_optimizer_pre(self, optimizer: torch.optim.Optimizer, has_closure: bool) -> bool:
        """Before a step; True asks for its closure to be wrapped (the step is read when it returns)."""
        if self._broken:
            if self._is_primary(optimizer):
                self._lockstep("reduce")
            return False
        self._guard("optimizer", lambda: self._register_optimizer(optimizer, stepping=True))
        w = self._model_of.get(optimizer)
        if w is None and not self.models and self._is_primary(optimizer) and not has_closure:  # no model at all: the loss alone
            self._stepping = (optimizer, None, True)
            self.own.timed(lambda: self._guard("step", lambda: self._begin(None, True)))
            return False
        if w is None:  # the model is not known yet: a closure's forward may make it known (LBFGS's first step)
            if has_closure and self._is_primary(optimizer):
                self._stepping, self._closure_step = (optimizer, None, True), True
                return True
            return False
        primary = self._is_primary(optimizer)
        # a new phase: an optimizer made after the run's first steps, or one that steps again before the primary does;
        # its steps are the run's steps from now on
        if not primary and (optimizer in self._since_primary or optimizer in self._later_phase):
            self._later_phase.discard(optimizer)
            self._primary = weakref.ref(optimizer)
            self._clock = w
            self.writer.update_run(optimizer=type(optimizer).__name__)
            primary = True
        if primary:
            self._since_primary = weakref.WeakSet()
        else:
            self._since_primary.add(optimizer)
        self._stepping = (optimizer, w, primary)
        if has_closure:
            self._closure_step = True
            return True
        self.own.timed(lambda: self._guard("step", lambda: self._begin(w, primary)))
        return False

    def on_closure_end(self, optimizer: torch.optim.Optimizer, result: Any) -> None:
        stepping = self._stepping
        if self._broken or not self._closure_step or stepping is None or stepping[0] is not optimizer:
            return
        self._closure_step = False  # later calls of the closure (LBFGS's line search) are past the step's start
        self.loss.close_over(result)
        w = stepping[1] or self._model_of.get(optimizer)
        self._stepping = (optimizer, w, stepping[2])
        if w is not None:
            self.own.timed(lambda: self._guard("step", lambda: self._begin(w, stepping[2])))

    def on_optimizer_post(self, optimizer: torch.optim.Optimizer) -> None:
        stepping = self._stepping
        if self._broken and self._is_primary(optimizer):
            self._lockstep("stop")
        if self._broken or stepping is None or stepping[0] is not optimizer:
            return
        _, w, primary = stepping
        if w is None:
            w = self._model_of.get(optimizer)
            if w is None:
                if self._step_open:  # a step of the loss alone
                    self.own.timed(lambda: self._guard("step", lambda: self._end(None, True)))
                    self._run_actions()
                self._stepping = None
                return
        if not self._step_open:  # a closure step whose closure never ran
            self.own.timed(lambda: self._guard("step", lambda: self._begin(w, primary)))
        self.own.timed(lambda: self._guard("step", lambda: self._end(w, primary)))
        if primary:
            self._run_actions()

    def on_backward_begin(self, tensors: Any) -> None:
        if self._broken:
            return
        try:
            if not self.models and self._created and self._forward.candidates:
                self._adopt_for(list(self._created))  # the model is known before its first step's backward
            self.loss.backward(tensors)
            w = self.watched
            if self._n_backward == 0 and not self._zeroed and w is not None and len(self.models) == 1:
                existing = [local(p.grad) for p in w.layout.params if p.grad is not None]
                if not existing:
                    self._zeroed = True
                else:
                    self._prebw = torch.stack([n.float() for n in gs.foreach_norm(existing)]).sum()
            self._n_backward += 1
            self._backwards_seen += 1
            if w is not None and self._nan_origin is None and isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                self._find_nan_origin(tensors, w)
            if self.observer.pending and isinstance(tensors, torch.Tensor):  # (measured steps only)
                self.observer.fed_by_graph(tensors, self._owner_of)
        except Exception as exc:
            self._internal_error("backward", exc)

    def on_backward_end(self) -> None:
        self._tags.clear()  # (the graph is consumed)
        if self._broken or self._primary is not None or self._explicit_steps or self._optimizer_seen:
            return
        if self._n_backward >= 2 or self._auto_steps:  # no optimizer at all: a step per backward
            self._auto_steps = True
            w = self.watched
            self.own.timed(lambda: self._guard("step", lambda: self._begin(w, True)))
            self.own.timed(lambda: self._guard("step", lambda: self._end(w, True)))
            self._run_actions()

    def on_zero_grad(self) -> None:
        self._zeroed = True

    def on_clip(self, parameters: list[torch.Tensor], how: str, limit: float | None, shareable: bool = False) -> bool:
        """Clipping is about to change the gradients: read the step's values now (the last clip before
        the step wins), so that the step records and judges the gradients as the backward made them.
        True when the step is an ordinary one that ``clip_grad_norm_`` covers (``shareable``): its norms are then
        taken from the clipping (:meth:`on_clip_norms`), which computes the same ones before it scales."""
        if self._broken or self._step_open or not parameters:
            return False
        w = next((m for m in self.models if id(parameters[0]) in m.param_ids), None)
        if w is None:
            return False
        self._clip_limit = limit if how == "norm" and limit is not None and math.isfinite(limit) else None
        self._clip_value = limit if how == "value" and limit is not None and math.isfinite(limit) else None
        clock = w is self.watched
        if shareable and self._ordinary(w, clock) and self._covers(w, parameters):
            self._stash = None
            self._sharing = (w, clock)
            return True

        def stash() -> None:
            self._stash = (w, self._collect(w, clock))

        self.own.timed(lambda: self._guard("step", stash))
        return False

    def on_clip_norms(self, parameters: list[torch.Tensor], norms: dict[int, torch.Tensor], total: Any) -> None:
        """The norms ``clip_grad_norm_`` took of the gradients before scaling them: the ordinary step's values."""
        sharing, self._sharing = self._sharing, None
        if sharing is None or self._broken:
            return
        w, clock = sharing
        missing = [p.grad for p in w.layout.params if p.grad is not None and id(p.grad) not in norms]
        if missing:  # (not expected) the clipped gradients' norms, over the factor that clipping scaled them by
            t = float(total) if isinstance(total, torch.Tensor) and total.numel() == 1 else math.nan
            limit = self._clip_limit
            if limit is None or not math.isfinite(t) or t <= 0 or limit <= 0:
                return  # (the step reads the gradients as clipped)
            factor = min(1.0, limit / (t + 1e-6))  # clip_grad_norm_'s own formula
            for g, n in zip(missing, torch._foreach_norm(missing)):
                norms[id(g)] = n / factor

        def stash() -> None:
            self._stash = (w, self._collect(w, clock, norms=norms))

        self.own.timed(lambda: self._guard("step", stash))

    def _covers(self, w: Watched, parameters: list[torch.Tensor]) -> bool:
        """Every gradient of the model is in the clipping, dense and on one device (the fused norms of the ordinary step)."""
        layout = w.layout
        if layout.sparse or layout.sharded_any or not layout.params:
            return False
        clipped = {id(p) for p in parameters}
        device = layout.params[0].device
        for p in layout.params:
            if p.grad is None or id(p) not in clipped or p.grad.is_sparse or p.grad.device != device:
                return False
        return True

    def on_scaled(self, scaler: Any, loss: Any, scaled: Any) -> None:
        if not self._broken:
            self.loss.scaled(loss, scaled, getattr(scaler, "_scale", None))

    def on_scaler_step(self, scaler: Any, optimizer: torch.optim.Optimizer, stepped: bool) -> None:
        """``GradScaler.step`` returned; when it skipped the optimizer (inf/NaN gradients), the step is
        recorded as a step of its own, marked skipped, never merged with the next."""
        if self._broken or stepped:
            return
        self._guard("optimizer", lambda: self._register_optimizer(optimizer))
        w = self._model_of.get(optimizer)
        if w is None:
            return
        primary = self._is_primary(optimizer)
        self._skipped = True
        if not self._step_open:
            self.own.timed(lambda: self._guard("step", lambda: self._begin(w, primary)))
        if primary:
            self.writer.put_event(self.step, EVENT_SKIPPED, "amp_skip", message="the GradScaler skipped this step: its gradients held inf/NaN")
        self.own.timed(lambda: self._guard("step", lambda: self._end(w, primary)))
        if primary:
            self._run_actions()

    def _on_root_call(self, w: Watched, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        w.inputs.add(self.step, args, kwargs)
        mask = kwargs.get("attention_mask")
        if w is self.watched and w.recorder.armed and isinstance(mask, torch.Tensor) and self._mask_step != self.step:
            self._mask_step = self.step  # (once a measured step)
            try:
                ids = kwargs.get("input_ids", args[0] if args else None)
                stats = mask_stats(mask, ids if isinstance(ids, torch.Tensor) else None)
                if stats is not None:
                    self.observer.rows.append(("mask", None, stats))
            except Exception as exc:
                self._internal_error("input", exc)
        if w is self.watched and w.recorder.armed and self._input_stats is None:
            try:
                # the first floating-point argument: a model given ids first (a recommender's user and item ids, then
                # its dense features) is judged on the features
                given: list[tuple[int | str, Any]] = [*enumerate(args), *kwargs.items()]
                at, x = next(((k, v) for k, v in given if isinstance(v, torch.Tensor) and v.is_floating_point()
                              and v.numel() > 1), (None, None))
                if x is not None:
                    if at != self._input_arg:  # which argument the statistics are of (a fix transforms that one)
                        self._input_arg = at
                        self.writer.update_run(input_arg=at)
                    x = x.detach().float()
                    mn, mx = torch.aminmax(x)
                    self._input_stats = torch.stack([mn, mx, x.mean(), x.std(), (~torch.isfinite(x)).sum().float()])
            except Exception as exc:
                self._internal_error("input", exc)

    def _set_probe(self, probe: nanorigin.BackwardProbe | None) -> None:
        """A step whose backward is watched for where non-finite gradients are made: while one is due, each module
        output is handed to :meth:`_on_output` (the module hooks hold every output's graph node anyway)."""
        self._probe = probe
        self._forward.on_output = self._on_output if probe is not None else None

    def _on_output(self, module: nn.Module, output: Any) -> None:
        """On the step probed for where non-finite gradients are made, each output's gradient is looked at as it passes."""
        out = output if isinstance(output, torch.Tensor) else first_tensor(output)
        if self._probe is not None and self._probe.step == self.step and out is not None and out.requires_grad:
            gid = self._index.get(id(module))
            if gid is not None and gid in self._leaves:
                try:
                    self._probe.watch(gid, out)
                except RuntimeError:  # a tensor that takes no hook (an inference-mode view, say): not looked at
                    pass

    # -- structure ----------------------------------------------------------------
    def _is_primary(self, optimizer: torch.optim.Optimizer) -> bool:
        return self._primary is not None and self._primary() is optimizer

    def _register_optimizer(self, optimizer: torch.optim.Optimizer, stepping: bool = False) -> None:
        if optimizer in self._optimizers:
            if stepping and optimizer not in self._model_of and not self._searched:
                self._searched = True  # (once: a search of the process's objects is not for every step)
                owner = self._adopt_for([optimizer], last_resort=True)
                if owner is not None:
                    self._model_of[optimizer] = owner
                    if self._is_primary(optimizer):
                        self._clock = owner
            return
        self._optimizers.add(optimizer)
        self._optimizer_seen = True
        if self._primary is None or self._primary() is None:
            self._primary = weakref.ref(optimizer)
            self.writer.update_run(optimizer=type(optimizer).__name__)
        self._guard("optimizer", self._record_optimizers)
        owner = next((w for w in self.models if w.owns(optimizer)), None)
        if owner is None:
            owner = self._adopt_for([optimizer], last_resort=stepping)
        if owner is not None:
            self._model_of[optimizer] = owner
            if self._is_primary(optimizer):
                self._clock = owner

    def _adopt_for(self, optimizers: list[torch.optim.Optimizer], last_resort: bool = False) -> Watched | None:
        """Adopt the top-level module called so far that owns these optimizers' parameters. As a last resort,
        when the optimizer steps and none does: the module that holds them though it is never called (a
        functional model's parameters in a ModuleDict), else the model the loop calls though the optimizer does
        not step it (a model rebuilt after its optimizer was made: a fault the diagnosis names)."""
        wanted = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
        known = set().union(*(w.param_ids for w in self.models)) if self.models else set()
        root = self._forward.choose(wanted - known) if self._forward.candidates else None
        if root is not None:
            root = self._holder_of_parts(root, wanted - known)
        if root is None and last_resort and wanted - known:
            root = owner_in_memory(wanted - known) or self._forward.largest(exclude=known)
        if root is None or any(w.root is unwrap(root) for w in self.models):
            return None
        return self._adopt(root)

    def _holder_of_parts(self, root: nn.Module, wanted: set[int]) -> nn.Module:
        """The loop calls parts of one model, never the model itself (a matrix factorisation's embeddings called
        by a function of the script's): when the optimizer's parameters lie in several top-level modules called,
        the model is the smallest module holding them all, if it holds little else."""
        try:
            mine = {id(p) for p in root.parameters()}
            elsewhere = wanted - mine
            if not elsewhere or not any(elsewhere & {id(p) for p in m.parameters()}
                                        for m in self._forward.candidates.values() if m is not root):
                return root
            holder = owner_in_memory(wanted)
            if holder is None:  # (a part made again after the optimizer: the model holds the parts called that it steps)
                called = set().union(*({id(p) for p in m.parameters()} for m in self._forward.candidates.values()))
                holder = owner_in_memory(wanted & called)
            if holder is None or holder is root:
                return root
            held = {id(p) for p in holder.parameters()}
            return holder if mine <= held and len(held) <= 2 * len(wanted) else root
        except Exception:  # (a module whose parameters() fails: the one the loop calls stays the model)
            return root

    def _optimizer_param_ids(self) -> set[int]:
        out: set[int] = set()
        for opt in list(self._optimizers):
            for g in opt.param_groups:
                out.update(id(p) for p in g["params"])
        return out

    def _history_len(self) -> int:
        conds = list(self.settings.conditions) + list(self.settings.breaks)
        return max(HISTORY_STEPS, max([self.settings.thresholds.loss_spike_window] + [w for c in conds for w in c.windows]) + 1)

    def _adopt(self, called: nn.Module) -> Watched:
        """Watch ``called`` (the module the loop calls): the model inside its wrappers (DDP, torch.compile). A second
        model (a GAN's other network, a later training phase) names every model's modules ``<model>.<name>``."""
        root = unwrap(called)
        s = self.settings
        prefix = ""
        if self.models:
            taken = {w.prefix for w in self.models}
            if len(self.models) == 1 and not self.models[0].prefix:
                first = self.models[0]
                first.rename(model_name(first.root, set()), self.writer)
                self._reindex()
                taken = {first.prefix}
            prefix = model_name(root, taken)
        last = self.models[-1] if self.models else None
        w = Watched(root, thresholds=s.thresholds, triggers=s.triggers, conditions=s.conditions, capture_window=s.capture_window,
                    history_len=self._history_len(), inputs=Inputs(s.capture_window + 1, s.capture_bytes), part=len(self.models),
                    module_offset=last.module_offset + last.layout.n_modules if last else 0,
                    param_offset=last.param_offset + len(last.layout.params) if last else 0, prefix=prefix)
        w.first_step = self.step
        self.models.append(w)
        fw = self._forward
        found_in_step = id(called) in fw.candidates  # chosen at a step: this step's forward ran before the model was known
        order: list[int] | None = None
        if found_in_step:
            w.note_loss_modules(fw.candidates)
            call = fw.last_call.get(id(called))
            if call is not None:  # keep this step's input
                w.inputs.add(self.step, tuple(call[0]), dict(call[1]))
            pos = {key: i for i, key in enumerate(fw.order)}
            if pos and len(self.models) == 1:
                order = sorted(range(w.layout.n_modules), key=lambda i: pos.get(id(w.layout.modules[i]), 10**9))
        w.write_structure(self.writer, order, self._optimizer_param_ids())
        if len(self.models) == 1:
            device = next((str(p.device) for p in w.layout.params), "cpu")
            self.writer.update_run(model=type(root).__name__, device=device)
        else:
            self.writer.update_run(models=[m.describe() for m in self.models])
        for opt in list(self._optimizers):
            if opt not in self._model_of and w.owns(opt):
                self._model_of[opt] = w
                if self._is_primary(opt):
                    self._clock = w
        if called is not root:  # what wraps the model (torch.compile, DDP) stands for its root: its output is the model's
            w.layout.module_index.setdefault(id(called), 0)
        self._reindex()
        fw.follow(w, w.recorder, called, root)
        if found_in_step:
            self._extra_sample = self.step + 1  # the forward of this step is past: measure the next one
        elif self._sampled(self.step):
            w.recorder.arm(want_order=not w.order_known)
            self._arm_observer(capture=False)
        self._record_optimizers()
        return w

    def _reindex(self) -> None:
        """id() of every watched module -> its store id, for tracing a NaN to its module across models."""
        self._index = {id(m): w.module_offset + i for w in self.models for i, m in enumerate(w.layout.modules)}
        self._leaves = {w.module_offset + i for w in self.models for i, m in enumerate(w.layout.modules) if is_leaf(m)}
        self._rank_of = {w.module_offset + i: w.module_offset + r for w in self.models for i, r in w.rank.items()}

    def _name(self, module_id: int) -> str:
        for w in self.models:
            if w.module_offset <= module_id < w.module_offset + len(w.names):
                return w.names[module_id - w.module_offset]
        return str(module_id)

    # -- the step ---------------------------------------------------------------
    def _sampled(self, step: int) -> bool:
        w = self.watched
        return (step % self.settings.every == 0 or step <= self._capture_until or step == self._extra_sample
                or (w is not None and not w.order_known))

    def _deferring(self, device: torch.device) -> bool:
        wanted = self.settings.defer
        if wanted is None:
            wanted = device.type == "cuda"
        if not wanted or device.type not in ("cuda", "cpu") or self.watches.actions or self._in_step or len(self.models) > 1:
            return False  # (other accelerators: no events here; several models: each step is read at once)
        self.watches.refresh(self.writer, self.step)  # a watch set from the editor turns deferral off before its step
        return not self.watches.triggers

    def _step_of(self, w: Watched, clock: bool) -> int:
        """The run's step a model's step belongs to: the clock's own, or for another model the clock's step
        it followed (a GAN's generator step after the discriminator's step s is step s), or the one it comes
        before, when it stepped first of all (a primary named by ``watch`` that steps second in its loop)."""
        if clock:
            return self.step
        if w.leads is None:
            w.leads = self.step == 0
        return self.step if w.leads or self.step == 0 else self.step - 1

    def _is_sampled(self, w: Watched, clock: bool) -> bool:
        return self._sampled(self._step_of(w, clock)) if clock else w.recorder.armed or bool(w.recorder.rows)

    def _ordinary(self, w: Watched, clock: bool) -> bool:
        """The step takes the common path: its gradients' norms are all it reads of them."""
        return (not self._is_sampled(w, clock) and self._prebw is None and (self._upd_ids is None or not clock)
                and self._input_stats is None)

    def _collect(self, w: Watched, clock: bool, norms: dict[int, torch.Tensor] | None = None) -> Collected | Pending:
        """Collect on the device: the common step's fused norms (``norms``: those clipping took already), or
        everything a sampled step needs."""
        layout = w.layout
        step = self._step_of(w, clock)
        sampled = self._is_sampled(w, clock)
        losses, on_host = self.loss.split()
        explicit = self.loss.explicit if self.loss.explicit is not None else (
            self.loss.closure if isinstance(self.loss.closure, float) else None)
        zeroed = self._zeroed_flag({})
        if self._ordinary(w, clock):
            device = layout.params[0].device if layout.params else torch.device("cpu")
            meta: dict[str, object] = {"explicit_loss": explicit, "lr": self._lr(), "n_backward": self._n_backward, "zeroed": zeroed,
                                       "clip_limit": self._clip_limit, "amp_scale": None, "loss_factor": self.loss.factor()}
            fast = col.common(layout, losses, on_host, defer=clock and self._deferring(device), ring=self._ring, step=step, meta=meta,
                              reduce=self.dist.reduce, norms=norms)
            if isinstance(fast, Pending):
                return fast
            if fast is not None:
                sample, mods, loss_host = fast
                when, wall = col.now()
                return Collected(step, sample, mods, loss_host, False, self._lr(), zeroed, self._n_backward, when, wall,
                                 explicit_loss=explicit, loss_factor=self.loss.factor(), clip_limit=self._clip_limit)
        if self.loss.scale is not None:
            self._transfer.add("amp_scale", self.loss.scale.reshape(1))
        stats, self._input_stats = (self._input_stats, None) if clock else (None, self._input_stats)
        sample, mods, host, act_ids = col.general(w, self._transfer, losses, on_host, sampled=sampled, prebw=self._prebw, input_stats=stats,
                                                  keep_work_space=self._sampled(step + 1), reduce=self.dist.reduce)
        self._take_recorder_extras(w, step)
        if clock and sampled:
            self._write_observations(step)
        when, wall = col.now()
        scale = host.get("amp_scale")
        return Collected(step, sample, mods, host.get("loss"), sampled, self._lr(), self._zeroed_flag(host), self._n_backward, when, wall,
                         host=host, act_ids=act_ids, explicit_loss=explicit, loss_factor=self.loss.factor(), clip_limit=self._clip_limit,
                         amp_scale=float(scale[0]) if scale is not None and len(scale) else None)

    def _current_module(self) -> int | None:
        """The store id of the innermost watched module running now (observations name where they happened)."""
        for m in reversed(self._forward.stack):
            gid = self._index.get(id(m))
            if gid is not None:
                return gid
        return None

    def _arm_observer(self, capture: bool) -> None:
        self.observer.arm(keep_maps=capture or not self._maps_kept)
        self._forward.tracking = True
        self._forward.stack = []

    def _write_observations(self, step: int) -> None:
        """A measured step's observations: rows, each attention module's mean entropy and largest weight, maps."""
        self._forward.tracking = False
        self._forward.top_args = ()
        rows, maps = self.observer.take()
        w = self.watched
        ent: dict[int, float] = {}
        top: dict[int, float] = {}
        for kind, module, data in rows:
            if isinstance(data.get("feeds"), int):  # (a module id: its name in the store)
                data["feeds"] = self._name(data["feeds"])
            self.writer.put_observation(step, kind, self._name(module) if module is not None else None, data)
            if kind == "attention" and module is not None:
                ent[module] = float(np.mean(data["entropy"]))
                top[module] = float(np.mean(data["maxprob"]))
        for m in self.models:
            mine = [g for g in ent if m.module_offset <= g < m.module_offset + m.layout.n_modules]
            if mine:
                for kind, values in (("attn_entropy", ent), ("attn_maxprob", top)):
                    row = np.full(m.layout.n_modules, np.nan)
                    for g in mine:
                        row[g - m.module_offset] = values[g]
                    self.writer.put_metric(step, kind, row, part=m.part)
        for module, probs in maps:
            if module is not None:
                self.writer.put_tensor(step, self._name(module), "attention", probs.numpy())
                self._maps_kept = True
        if w is not None and step % max(self.settings.every, 1) == 0:
            self._record_optimizers()

    def _record_optimizers(self) -> None:
        """The optimizers' hyperparameters, per parameter group, when they change (the run's record of them)."""
        described = [describe_optimizer(o) for o in self._ordered_optimizers()]
        if described and described != self._optimizers_written:
            self._optimizers_written = described
            self.writer.update_run(optimizers=described)

    def _ordered_optimizers(self) -> list[torch.optim.Optimizer]:
        primary = self._primary() if self._primary is not None else None
        rest = [o for o in list(self._optimizers) if o is not primary]
        return ([primary] if primary is not None else []) + rest

    def _take_recorder_extras(self, w: Watched, step: int) -> None:
        """What the recorder learned this forward besides its rows: module modes, forward order, captured activations."""
        rec, layout = w.recorder, w.layout
        if rec.modes:
            modes = np.full(layout.n_modules, np.nan)
            for mid, training in rec.modes.items():
                modes[mid] = float(training)
            self.writer.put_metric(step, "training", modes, part=w.part)
        if not w.order_known:
            # a model whose modules its forward never calls has no order to learn: after two measured steps without
            # one (the first may have run before the recorder was armed), its modules keep their places, so that its
            # steps stop being measured for the order
            w.unordered = 0 if rec.order else w.unordered + 1
            if rec.order or w.unordered >= 2:
                w.learn_order(self.writer, rec.order)
                self._reindex()
        for mid, arr in rec.captured:
            self.writer.put_tensor(step, w.names[mid], "activation", arr)
        if rec.captured:  # the input of the forward whose activations were kept (token labels, the sample shown)
            last = w.inputs.last()
            if last is not None and last[0] == step and not any(s == step for s, _, _ in self._inputs_written):
                x = first_tensor(last[1]) if last[1] else first_tensor(last[2])
                if x is not None:
                    self.writer.put_tensor(step, w.names[0], "input", fit(host_array(local(x)), INPUT_BYTES))
                    self._inputs_written.append((step, 0, 0))
        if rec.captured or rec.capture:
            rec.capture, rec.captured = set(), []

    def _begin(self, w: Watched | None, clock: bool) -> None:
        """A model's step has its gradients: collect, then process (or, deferred, process the previous step)."""
        self._step_open = True
        if w is None:  # no model known: the loss alone
            self._loss_only_step()
            return
        stash, self._stash = self._stash, None
        if stash is not None and stash[0] is w and all(p.grad is None for p in w.layout.params):
            stash = None  # read before clipping, but gone by the step (zero_grad() between them): the step has none
        result = stash[1] if stash is not None and stash[0] is w else self._collect(w, clock)
        if isinstance(result, Pending):  # read the previous step's values, whose copy has landed meanwhile
            previous, self._pending = self._pending, result
            if previous is not None:
                self._process(col.from_pending(w.layout, previous), w, current=False)
            return
        if clock:
            self._finish_pending()  # steps are processed in order
        result.skipped = self._skipped
        self._process(result, w, current=True)

    def _loss_only_step(self) -> None:
        t = self._transfer
        losses, on_host = self.loss.split()
        if losses:
            t.add("loss", [x.float().reshape(()) for x in losses])
        if self._prebw is not None:
            t.add("prebw", [self._prebw])
        host = t.fetch()
        explicit = self.loss.explicit
        values = col.host_losses(host.get("loss"), on_host)
        loss = explicit if explicit is not None else (float(np.mean(values)) * self.loss.factor() if values is not None else None)
        self.writer.put_step(StepRow(self.step, time.time(), self._duration(), loss, self._lr(), None, None, False, self._n_backward,
                                     self._zeroed_flag(host), False, None if loss is None else int(math.isfinite(loss)), self._skipped))

    def _finish_pending(self) -> None:
        pending, self._pending = self._pending, None
        w = self.watched
        if pending is not None and w is not None:
            self._guard("step", lambda: self._process(col.from_pending(w.layout, pending), w, current=False))

    def _process(self, c: Collected, w: Watched, *, current: bool) -> None:
        """Step values, triggers and watches, capture, and the store rows of one model's step from its host-side
        values. ``c.step`` is this step, or the one before when its values were deferred."""
        layout, history = w.layout, w.history
        clock = w is self.watched
        loss = loss_of(c)
        gnorm, gmax = global_norms(c)
        if clock and loss is not None and math.isfinite(loss) and len(self._loss_start) < LOSS_SCALE_STEPS:
            self._loss_start.append(abs(loss))
            self._loss_scale = float(np.median(self._loss_start))
        counts = nonfinite_counts(layout, c, current=current)
        upd = self._write_updates(c.host) if clock else None
        values = step_values(c, layout, loss=loss, gnorm=gnorm, gmax=gmax, loss_scale=self._loss_scale, nonfinite_counts=counts,
                             update_ratio=upd)
        history.push(values)
        anomalies = self._evaluate(w, history)
        in_window = c.step <= self._capture_until
        if anomalies and not in_window:
            # a deferred step is past: capture the step at hand (its gradients and input are still here),
            # unless the run is closing and no later step ran
            last = w.inputs.last()
            at = self.step if last is not None and last[0] == self.step else c.step
            self._capture_until = at + self.settings.capture_window
            worst = worst_modules(layout, anomalies, c.mods, history, w.own)
            budget = capture(self.writer, layout, w.names, at, worst, w.inputs, self.settings.capture_bytes)
            self._capture_acts = (w, interesting(layout, worst), budget)
            capture_now = True
        else:
            capture_now = in_window
        origin = self._nan_origin if current else None
        probe = self._probe
        if probe is not None and probe.step == c.step and current:
            self._set_probe(None)
            made = probe.origin(self._rank_of)
            if made is not None and not values.scalars.get("loss_nonfinite"):  # (a non-finite forward says nothing of the backward)
                name = self._name(made)
                self.writer.put_event(c.step, EVENT_ORIGIN, "backward", module=name, message=(
                    f"non-finite gradients are made in the backward of {name!r}: the gradient of its output is finite, "
                    "the one it passes back is not"), data={"origin": name, "where": "backward"})
        elif (probe is None and current and origin is None and values.scalars.get("grad_nonfinite")
              and not values.scalars.get("loss_nonfinite") and c.step == self.step):
            self._set_probe(nanorigin.BackwardProbe(self.step + 1))  # the loss is finite, the gradients are not: watch the next backward
        for f in anomalies:
            data: dict[str, Any] = {"capture_until": self._capture_until, **({"captured_at": self.step} if c.step != self.step else {})}
            if f.trigger == "nan_inf" and origin is not None:
                name = "input" if origin == nanorigin.INPUT else "loss" if origin == nanorigin.LOSS else self._name(origin)
                where = "the input batch" if origin == nanorigin.INPUT else "the loss" if origin == nanorigin.LOSS else repr(name)
                f.module = None if origin < 0 else name
                f.message = f.message.split(" (first in")[0] + f" (first in {where}, traced in the step's autograd graph)"
                data["origin"] = name
            self.anomalies.append((c.step, f.trigger))
            self.writer.put_event(c.step, EVENT_TRIGGER, f.trigger, module=f.module, condition=f.condition, value=f.value,
                                  message=f.message, data=data)
        self._record(w, c, loss, gnorm, gmax, capture_now, clock)

    def _record(self, w: Watched, c: Collected, loss: float | None, gnorm: float | None, gmax: float | None, capture: bool,
                clock: bool) -> None:
        """The step's rows in the store."""
        if clock:
            clipped = None
            if c.clip_limit is not None and gnorm is not None and math.isfinite(gnorm):
                clipped = gnorm * min(1.0, c.clip_limit / (gnorm + 1e-6))  # what clip_grad_norm_ leaves (its own formula)
            finite = None if loss is None else int(math.isfinite(loss))
            self.writer.put_step(StepRow(c.step, c.wall, self._duration(c.when), loss, c.lr, gnorm, gmax, c.sampled, c.n_backward, c.zeroed,
                                         capture, finite, c.skipped, c.clip_limit, clipped, c.amp_scale, self._clip_value))
        else:
            self.writer.put_model_step(c.step, w.part, time=c.wall, loss=loss, lr=c.lr, grad_norm=gnorm, grad_max=gmax,
                                       n_backward=c.n_backward, skipped=c.skipped)
        mods = c.mods
        for kind in ("grad_norm", "grad_max", "grad_mean", "grad_zero_frac", "weight_norm", "grad_weight_cos", "nan_count", *ACTIVATION_FIELDS):
            if kind in mods:
                self.writer.put_metric(c.step, kind, mods[kind], part=w.part)
        self.writer.put_metric(c.step, "param_grad_norm", c.sample.l2, part=w.part)
        wl2 = c.sample.weight_l2
        if wl2 is not None and len(wl2) == len(w.layout.params) and not w.layout.sharded_any:
            # each parameter's own norm (a layer's weight matrix apart from its bias: the scale an initialisation sets)
            self.writer.put_metric(c.step, "param_weight_norm", wl2, part=w.part)
        if "input" in c.host:
            self.writer.put_metric(c.step, "input_stats", c.host["input"], part=w.part)
        rec = w.recorder
        if rec.loss_modules - w.loss_modules_seen:
            w.loss_modules_seen |= rec.loss_modules
            self.writer.update_run(loss_module=",".join(sorted(set().union(*(m.loss_modules_seen for m in self.models)))))
        if c.sampled and c.step >= w.params_due:  # (parameters' set-up rarely changes: not at every step of full detail)
            w.params_due = c.step + DEFAULT_EVERY
            self._update_params(w, c.sample.present)
        primary = self._primary() if self._primary is not None else None
        if clock and c.sampled and primary is not None and c.step == self.step and not c.skipped:
            in_opt = {id(p) for g in primary.param_groups for p in g["params"]}
            ids = [j for j, p in enumerate(w.layout.params) if id(p) in in_opt and c.sample.present[j]]
            w.updates.before(w.layout, ids)

    def _end(self, w: Watched | None, clock: bool) -> None:
        """A model's step is done (its optimizer has stepped): the run's step advances with the clock's."""
        if w is not None and clock:
            ids = w.updates.after(w.layout, self._transfer, keep=self._sampled(self.step + 1))
            if ids is not None and not self._skipped:
                self._upd_ids, self._upd_step = ids, self.step
        self.loss.reset()
        self._n_backward = 0
        self._zeroed = None
        self._prebw = None
        self._stash = None
        self._sharing = None  # (a clip that raised never handed its norms over)
        self._clip_limit = None
        self._clip_value = None
        self._skipped = False
        self._nan_origin = None
        self._step_open = False
        self._closure_step = False
        self._stepping = None
        if not clock:
            return
        self.step += 1
        if self.step % ot.OVERHEAD_WINDOW == 0:
            self.own.check(self.step, self.writer, self.settings.every, DEFAULT_EVERY)
        if self._sampled(self.step):
            for m in self.models:
                if self._capture_acts is not None and self._capture_acts[0] is m:
                    m.recorder.capture, m.recorder.capture_budget = self._capture_acts[1], self._capture_acts[2]
                    m.recorder.captured = []
                elif not self._baseline and m is self.watched and self.step > 0:
                    # one ordinary step's activations, kept to set an anomaly's beside (the sandbox's "normal step")
                    self._baseline = True
                    m.recorder.capture = interesting(m.layout, [i for i in range(m.layout.n_modules) if m.own[i]][:CAPTURE_MODULES])
                    m.recorder.capture_budget, m.recorder.captured = min(BASELINE_BYTES, self.settings.capture_bytes), []
                m.recorder.arm(want_order=not m.order_known)
            self._arm_observer(capture=self._capture_acts is not None)
            self._capture_acts = None
        if self.progress is not None:
            try:
                self.progress(self)
            except Exception:
                pass

    def _lockstep(self, which: str) -> None:
        """A rank whose collection broke still takes its part in the collectives the other ranks make at each
        step (the sharded norms' reduction, agreeing whether to stop): one rank leaving them would hang the rest."""
        w = self.watched
        try:
            if which == "reduce" and w is not None and w.layout.sharded_any and self.dist.active:
                self.dist.reduce(torch.zeros(len(w.layout.params)), "sum", torch.as_tensor(w.layout.sharded))
            elif which == "stop":
                self.dist.agree_to_stop(self.watches, self.step)
        except Exception:
            pass

    def _run_actions(self) -> None:
        self.dist.agree_to_stop(self.watches, self.step - 1)
        self.watches.run_actions(self.step - 1, self.writer, self.store_path, self.dist.tag)
        limit = self.settings.max_steps
        if limit is not None and self.step >= limit and not self.dist.active:
            self.writer.flush()
            raise StepLimit(f"gradsight: stopped after {limit} steps (--max-steps); snapshot in {self.store_path}")

    def _evaluate(self, w: Watched, history: History) -> list[Fired]:
        """The built-in triggers and the user's conditions that fire at this step (and the watches)."""
        fired: list[Fired] = []
        if w.quick.quiet(history):
            for trig in w.layer_triggers:
                trig.quiet_step(history)
            checks = w.other_triggers
        else:
            checks = list(w.triggers.values())
        for trig in checks:
            hit = trig(history)
            if hit is not None:
                fired.append(hit)
        self.watches.evaluate(history, self.writer, self.step)
        return [f for f in fired if f.trigger in w.triggers]

    def _owner_of(self, param: torch.Tensor) -> int | None:
        """The store id of the module that holds a parameter (of any watched model), or None."""
        for w in self.models:
            j = w.layout.param_index.get(id(param))
            if j is not None:
                return w.module_offset + int(w.layout.param_module[j])
        return None

    def _find_nan_origin(self, loss: torch.Tensor, w: Watched) -> None:
        """A non-finite loss: find where it started in the graph now, before backward() frees it. Read on
        the host for free on the CPU; on an accelerator only on measured steps (the read would wait)."""
        last = self.loss.last()
        if isinstance(last, float):
            value = last  # (a CPU loss: read once, at backward)
        elif isinstance(last, torch.Tensor) and w.recorder.armed:
            value = float(last)
        else:
            return
        if math.isfinite(value):
            return
        found = nanorigin.origin(loss, self._index, self._tags, self._rank_of)
        if found is not None:
            self._nan_origin = found

    # -- small helpers ------------------------------------------------------------
    def _zeroed_flag(self, host: dict[str, np.ndarray]) -> int | None:
        if self._zeroed:
            return 1
        pre = host.get("prebw")
        if pre is not None and len(pre):
            return int(pre[0] == 0)
        return None

    def _lr(self) -> float | None:
        stepping = self._stepping
        opt = stepping[0] if stepping is not None else (self._primary() if self._primary is not None else None)
        if opt is None or not opt.param_groups:
            return None
        lr = opt.param_groups[0].get("lr")
        try:
            return float(lr) if lr is not None else None
        except (TypeError, ValueError):
            return None

    def _duration(self, when: float | None = None) -> float:
        now = time.perf_counter() if when is None else when
        d, self._last_time = now - self._last_time, now
        return d

    def _write_updates(self, host: dict[str, np.ndarray]) -> np.ndarray | None:
        """The update ratio of the last sampled step, whose values came with this transfer."""
        w = self.watched
        if self._upd_ids is None or "upd_delta" not in host or w is None:
            return None
        upd, moved = gs.update_sums(w.layout, self._upd_ids, host["upd_delta"], host["upd_weight"])
        self.writer.put_metric(self._upd_step, "update_ratio", upd, part=w.part)
        self.writer.put_metric(self._upd_step, "update_l1", moved, part=w.part)
        self._upd_ids = None
        return upd

    def _update_params(self, w: Watched, present: np.ndarray) -> None:
        layout = w.layout
        in_opt = self._optimizer_param_ids()
        unstepped = []
        for j, p in enumerate(layout.params):
            state = (int(p.requires_grad), int(id(p) in in_opt), int(present[j]))
            old = w.params_state.get(j)
            if old is not None:
                state = (state[0], state[1], max(state[2], old[2]))
            if state != old:
                w.params_state[j] = state
                self.writer.set_param_state(w.param_offset + j, *state)
            if state[2] and not state[1] and self._primary is not None:
                unstepped.append(layout.param_names[j])
        if unstepped and not self._warned_unstepped:
            self._warned_unstepped = True
            self.writer.put_event(self.step, EVENT_WARNING, "not_updated", message=(
                f"{len(unstepped)} parameters receive gradients but no optimizer updates them: {', '.join(unstepped[:5])}"
                + (" ..." if len(unstepped) > 5 else "")))
        self._check_unregistered(w, in_opt)

    def _check_unregistered(self, w: Watched, in_opt: set[int]) -> None:
        """Modules or parameters held in a plain list or dict of the model: reported once their parameters get
        gradients that no optimizer holds (they run in the forward, and are never trained)."""
        if self._primary is None:
            return
        if w.unregistered is None:
            w.unregistered = find_unregistered(w.root)
        for u in w.unregistered:
            left = [] if u.path in w.unregistered_told else [
                p for p in u.params if p.requires_grad and p.grad is not None and id(p) not in in_opt]
            if not left:
                continue
            w.unregistered_told.add(u.path)
            n = sum(int(p.numel()) for p in left)
            what = f"{u.modules} modules" if u.modules else f"{len(u.params)} parameters"
            self.writer.put_event(self.step, EVENT_WARNING, UNREGISTERED, module=w.names[0], value=float(n), message=(
                f"{prefixed(w.prefix, u.path)} is a plain Python {u.container} holding {what} ({n:,} parameters): they are not "
                f"registered in the model, so they are not in its parameters() and no optimizer updates them, though they "
                f"receive gradients (make it an {advice(u)})"), data={
                "attribute": u.path.rpartition(".")[2], "holder": prefixed(w.prefix, u.path.rpartition(".")[0]) if "." in u.path else w.names[0],
                "owner": u.owner, "container": u.container, "use": advice(u)})

    def _guard(self, where: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except GradsightStop:
            raise
        except Exception as exc:
            self._internal_error(where, exc)

    def _internal_error(self, where: str, exc: BaseException) -> None:
        """Report once and degrade: a broken step path turns collection off, training goes on."""
        if where not in self._errors:
            self._errors.add(where)
            print(f"gradsight{self.dist.tag}: internal error in {where} ({exc!r}); collection degraded, training continues", file=sys.stderr)
            if os.environ.get("GRADSIGHT_DEBUG"):  # (for gradsight's own developers: where it broke)
                import traceback

                traceback.print_exception(type(exc), exc, exc.__traceback__)
            try:
                self.writer.put_event(self.step, EVENT_WARNING, "internal_error", message=f"{where}: {exc!r}")
            except Exception:
                pass
        if where == "step":
            self._broken = True
            for w in self.models:
                w.recorder.disarm()


def owner_in_memory(wanted: set[int]) -> nn.Module | None:
    """The smallest module that holds every one of these parameters: among the user's variables first, then
    among all of the process's objects (once per run: it is a search of everything the collector tracks)."""
    def smallest(mods: list[nn.Module]) -> nn.Module | None:
        best, size = None, 10**12
        for m in mods:
            try:
                ids = {id(p) for p in m.parameters()}
            except Exception:
                continue
            if wanted <= ids and len(ids) < size:
                best, size = m, len(ids)
        return best

    frame, seen = user_frame(), []
    for _ in range(8):
        if frame is None:
            break
        seen += [v for v in list(frame.f_locals.values()) + list(frame.f_globals.values()) if isinstance(v, nn.Module)]
        frame = frame.f_back
    found = smallest(seen)
    if found is None:
        import gc

        found = smallest([o for o in gc.get_objects() if isinstance(o, nn.Module)])
    return found


# names a framework's callback knows for the models it watches (a LightningModule's ``netG``): no user frame holds them
NAME_HINTS: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()


def model_name(root: nn.Module, taken: set[str]) -> str:
    """A short name for a watched model: the variable that holds it in the user's frame (``netG``, or an
    attribute of ``self`` such as ``generator``), else its class; made unique among ``taken``."""
    name = NAME_HINTS.get(root, "")
    frame = None if name else user_frame()
    for _ in range(6):
        if frame is None or name:
            break
        for key, value in list(frame.f_locals.items()):
            if value is root and key != "self" and key.isidentifier():
                name = key
                break
        owner = frame.f_locals.get("self")
        if not name and isinstance(owner, nn.Module):
            name = next((k for k, child in owner.named_children() if child is root), "")
        if not name:
            name = next((k for k, v in list(frame.f_globals.items()) if v is root and k.isidentifier()), "")
        frame = frame.f_back
    name = name or type(root).__name__
    out, k = name, 2
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    return out


_HYPER = ("lr", "initial_lr", "max_lr", "weight_decay", "eps", "betas", "momentum", "dampening", "nesterov", "amsgrad", "maximize", "alpha",
          "lr_decay", "centered")


def describe_optimizer(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """An optimizer's type and each parameter group's hyperparameters (numbers as plain floats)."""
    groups = []
    for g in opt.param_groups:
        entry: dict[str, Any] = {"params": sum(1 for _ in g["params"])}
        for key in _HYPER:
            if key in g:
                v = g[key]
                try:
                    entry[key] = [float(x) for x in v] if isinstance(v, (tuple, list)) else (v if isinstance(v, bool) else float(v))
                except (TypeError, ValueError):
                    entry[key] = str(v)
        groups.append(entry)
    return {"type": type(opt).__name__, "groups": groups}

