"""A watching session: one root model, its optimizers, a run store, triggers.

A step is one ``optimizer.step()`` of the primary (first seen) optimizer.
Before it runs (gradients ready, weights not yet updated) the session brings
the step's statistics to the host in one copy, evaluates triggers, watches and
breakpoints, and captures tensors when something fired. After it runs the
step is complete: the session then pauses in the user's frame (debugger) or
stops the run (``--break`` with no debugger) if a breakpoint asked for it.
"""

from __future__ import annotations

import math
import os
import platform
import sys
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules.loss import _Loss

from .. import __version__
from ..conditions import Condition, ConditionError, parse
from ..store import EVENT_BREAKPOINT, EVENT_TRIGGER, EVENT_WARNING, StoreWriter
from ..thresholds import Thresholds
from . import activations as act
from . import gradstats as gs
from .hooks import GlobalHooks, RootFinder
from .layout import WEIGHTED, Layout, first_tensor
from .pause import debugger_attached, pause, user_frame
from .sourcemap import map_modules
from .triggers import BUILTIN, Fired, History, QuickCheck, StepValues, Trigger, build, condition_check, condition_needs

# A sampled step (activation statistics of every module, update ratio) costs 0.25-0.6x
# a plain step in gradsight's own time (benchmarks/step_costs.py); one step in 100 keeps
# that under 1%.
DEFAULT_EVERY = 100
DEFAULT_CAPTURE_WINDOW = 5
DEFAULT_CAPTURE_BYTES = 64 * 2**20
CAPTURE_MODULES = 4
LOSS_SCALE_STEPS = 10  # the run's loss scale is the median of its first losses
# gradsight measures its own time on the training thread over windows of steps and says so, once,
# when it slows training noticeably: more than this share of the rest of the step, and more than
# OVERHEAD_MIN_MS per step (a toy model's sub-millisecond step is not worth a warning)
OVERHEAD_WINDOW = 200
OVERHEAD_SHARE = 0.25
OVERHEAD_MIN_MS = 2.0
ACTIVE: Session | None = None
_STEP_SQL = ("INSERT OR REPLACE INTO steps (step, time, duration, loss, lr, grad_norm, grad_max, sampled, n_backward, grads_zeroed, capture,"
             " loss_finite) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)")


class GradsightStop(BaseException):
    """Ends the run at a ``--break`` breakpoint when no debugger is attached.

    A BaseException, like KeyboardInterrupt, so the user's ``except Exception`` does not swallow it.
    """


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


@dataclass
class _Action:
    fired: Fired
    kind: str  # "pause" (debugger) or "stop" (--break without debugger)
    frame: Any = None


@dataclass
class _Pending:
    """A common step whose gradient norms (and loss) are still being copied from the accelerator."""

    step: int
    host: torch.Tensor  # the norms, then the loss when has_loss: pinned memory, filled by an async copy
    event: Any  # a torch.cuda.Event recorded after the copy (None on the host)
    n: int
    has_loss: bool
    explicit_loss: float | None
    lr: float | None
    n_backward: int
    zeroed: int | None
    when: float  # perf_counter() when the step was gathered
    wall: float


class Session:
    closed: bool = False
    def __init__(self, store: str | os.PathLike[str], *, model: nn.Module | None = None,
                 optimizer: torch.optim.Optimizer | None = None, settings: Settings | None = None,
                 script: str | None = None, argv: list[str] | None = None,
                 progress: Callable[[Session], None] | None = None) -> None:
        global ACTIVE
        if ACTIVE is not None and not ACTIVE.closed:
            raise RuntimeError("gradsight is already watching a model in this process; close that handle first")
        self.settings = settings or Settings()
        if self.settings.every < 1:
            raise ValueError(f"every must be at least 1, got {self.settings.every}")
        self.store_path = os.fspath(store)
        rank = int(os.environ.get("RANK", "0") or 0)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if rank > 0:  # one file per rank
            base, ext = os.path.splitext(self.store_path)
            self.store_path = f"{base}.rank{rank}{ext or '.db'}"
        self.writer = StoreWriter(self.store_path, {
            "script": script, "argv": argv if argv is not None else list(sys.argv), "cwd": os.getcwd(),
            "started": time.time(), "status": "running", "torch_version": torch.__version__,
            "gradsight_version": __version__, "python_version": platform.python_version(),
            "device": None, "rank": rank, "world_size": world, "pid": os.getpid(),
            "settings": self.settings.as_json(), "loss_source": "backward",
        })
        self.progress = progress
        self.closed = False
        self.step = 0
        self.anomalies: list[tuple[int, str]] = []
        self.layout: Layout | None = None
        self.history: History | None = None
        self.recorder: act.ActivationRecorder | None = None
        self.triggers: dict[str, Trigger] = {}
        self.watch_triggers: list[tuple[Trigger, bool]] = []  # (trigger, is --break)
        self._watch_version = 0
        self._primary: weakref.ReferenceType[torch.optim.Optimizer] | None = None
        self._optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self._losses: list[torch.Tensor] = []
        self._explicit_loss: float | None = None
        self._n_backward = 0
        self._zeroed: bool | None = None
        self._prebw: torch.Tensor | None = None
        self._input_stats: torch.Tensor | None = None
        self._replaying = False
        self._loss_start: list[float] = []  # the first losses: the run's scale
        self._loss_scale = math.nan  # min, max, mean, std, non-finite count of the input
        self._auto_steps = False  # no optimizer seen: each backward ends a step
        self._explicit_steps = False  # the user ends steps with mark_step()
        self._transfer = gs.Transfer()
        self._updates = gs.UpdateTracker()
        self._upd_ids: list[int] | None = None
        self._upd_step = -1
        self._capture_until = -1
        self._inputs: deque[tuple[int, tuple[Any, ...], dict[str, Any]]] = deque(maxlen=self.settings.capture_window + 1)
        self._root_handle: Any = None
        self._actions: list[_Action] = []
        self._errors: set[str] = set()
        self._broken = False
        self._last_time = time.perf_counter()
        self._own_steps = 0.0  # seconds spent in the step callbacks (the activation hooks count their own)
        self._started: float | None = None  # perf_counter() when the first step began
        self._closed_at: float | None = None
        self._window = (0, time.perf_counter(), 0.0)  # the overhead window's first step, start time, own time then
        self._overhead_warned = False
        self._pending: _Pending | None = None
        self._in_step = False  # deferral turned off for good (a debugger condition reads the history)
        self._ring: list[tuple[torch.Tensor, Any]] = []  # two pinned buffers with their events, used in turn
        self._ring_next = 0
        self._order_known = False
        self._params_state: dict[int, tuple[int, int, int]] = {}
        self._warned_unstepped = False
        self._params_due = 0  # the next sampled step at which the parameters' set-up is recorded
        self._loss_modules_seen: set[str] = set()
        self._finder: RootFinder | None = None
        self._hooks = GlobalHooks(self)
        self._hooks.install()
        ACTIVE = self
        if optimizer is not None:
            self._register_optimizer(optimizer)
        if model is not None:
            self._adopt(model)
        else:
            self._finder = RootFinder()
            self._finder.install()

    # -- public ----------------------------------------------------------------
    def log(self, loss: float | torch.Tensor | None = None) -> None:
        """Tell the session this step's loss (overrides the one found at ``backward``)."""
        if loss is not None:
            self._explicit_loss = float(loss.detach().float().mean()) if isinstance(loss, torch.Tensor) else float(loss)
            self.writer.update_run(loss_source="explicit")

    def mark_step(self) -> None:
        """End a step by hand (for training loops without a torch optimizer)."""
        self._explicit_steps = True
        self._guard("step", self._begin_step)
        self._guard("step", self._end_step)
        self._run_actions()

    def stay_in_step(self) -> None:
        """Process every step before the next one runs from now on (a breakpoint condition
        evaluated in the user's frame reads this run's history), and what is pending now."""
        self._in_step = True
        self._finish_pending()

    def close(self, status: str = "finished") -> None:
        global ACTIVE
        if self.closed:
            return
        self._finish_pending()
        self._guard("step", lambda: self._write_updates(self._transfer.fetch()))  # the last sampled step's
        self._closed_at = time.perf_counter()
        self.closed = True
        self._hooks.remove()
        if self._finder is not None:
            self._finder.remove()
        if self.recorder is not None:
            self.recorder.disarm()
        if self._root_handle is not None:
            self._root_handle.remove()
        self.writer.update_run(status=status, ended=time.time())
        self.writer.close()
        if ACTIVE is self:
            ACTIVE = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close("finished" if exc_type is None else "crashed")

    # -- listener callbacks (see hooks.py) --------------------------------------
    def on_optimizer_pre(self, optimizer: torch.optim.Optimizer) -> None:
        if self._broken:
            return
        self._guard("optimizer", lambda: self._register_optimizer(optimizer))
        if self._is_primary(optimizer):
            self._timed_step(self._begin_step)

    def on_optimizer_post(self, optimizer: torch.optim.Optimizer) -> None:
        if self._broken or not self._is_primary(optimizer):
            return
        self._timed_step(self._end_step)
        self._run_actions()

    def on_backward_begin(self, tensors: Any) -> None:
        if self._broken:
            return
        try:
            if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                self._losses.append(tensors.detach())
            if self._n_backward == 0 and not self._zeroed and self.layout is not None:
                existing = [p.grad for p in self.layout.params if p.grad is not None]
                if not existing:
                    self._zeroed = True
                else:
                    self._prebw = torch.stack([n.float() for n in gs.foreach_norm(existing)]).sum()
            self._n_backward += 1
        except Exception as exc:
            self._internal_error("backward", exc)

    def on_backward_end(self) -> None:
        if self._broken or self._primary is not None or self._explicit_steps:
            return
        if self._n_backward >= 2 or self._auto_steps:  # no optimizer: a step per backward
            self._auto_steps = True
            self._timed_step(self._begin_step)
            self._timed_step(self._end_step)
            self._run_actions()

    def on_zero_grad(self) -> None:
        self._zeroed = True

    # -- structure ----------------------------------------------------------------
    def _is_primary(self, optimizer: torch.optim.Optimizer) -> bool:
        return self._primary is not None and self._primary() is optimizer

    def _register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if optimizer in self._optimizers:
            return
        self._optimizers.add(optimizer)
        if self._primary is None or self._primary() is None:
            self._primary = weakref.ref(optimizer)
            self.writer.update_run(optimizer=type(optimizer).__name__)
        if self.layout is None and self._finder is not None:
            wanted = {id(p) for g in optimizer.param_groups for p in g["params"]}
            root = self._finder.choose(wanted)
            if root is not None:
                self._adopt(root)

    def _optimizer_param_ids(self) -> set[int]:
        out: set[int] = set()
        for opt in list(self._optimizers):
            for g in opt.param_groups:
                out.update(id(p) for p in g["params"])
        return out

    def _adopt(self, root: nn.Module) -> None:
        layout = Layout.from_model(root)
        self.layout = layout
        self.history = History(layout.names, maxlen=max(64, self._max_window() + 1))
        own = layout.has_own_params()
        weighted = np.array([isinstance(m, WEIGHTED) or (own[i] and not isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and _is_leaf(m))
                             for i, m in enumerate(layout.modules)])
        numel = layout.member @ layout.numel
        leaf = np.array([_is_leaf(m) for m in layout.modules])
        own = own & leaf  # a "layer": a leaf module with parameters of its own
        self._own = own
        all_triggers = build(layout.names, self.settings.thresholds, own, weighted, numel, self.settings.capture_window)
        self.triggers = {k: v for k, v in all_triggers.items() if k in self.settings.triggers}
        for cond in self.settings.conditions:
            self.triggers[cond.text] = Trigger(cond.text, condition_check(cond, cond.text), self.settings.capture_window, condition_needs(cond))
        self._quick = QuickCheck(self.settings.thresholds, np.flatnonzero(own), np.flatnonzero(weighted), numel)
        self._layer_triggers = [v for k, v in self.triggers.items() if k in ("grad_explode", "nan_inf", "vanishing", "dead_units")]
        self._other_triggers = [v for v in self.triggers.values() if v not in self._layer_triggers]
        self.watch_triggers = [(Trigger(c.text, condition_check(c, c.text), 1), True) for c in self.settings.breaks]
        self.recorder = act.ActivationRecorder(layout)
        found_in_step = self._finder is not None
        if self._finder is not None:
            self.recorder.loss_modules |= {type(m).__name__ for m in self._finder.candidates.values() if isinstance(m, _Loss)}
            args = self._finder.last_call.get(id(root))
            if args:  # this step's forward ran before we knew the model: keep its input (positional only)
                self._inputs.append((self.step, tuple(args), {}))
            pos = {key: i for i, key in enumerate(self._finder.order)}
            order = sorted(range(layout.n_modules), key=lambda i: pos.get(id(layout.modules[i]), 10**9))
            self._order_known = bool(pos)
            self._finder.remove()
            self._finder = None
        else:
            order = list(range(layout.n_modules))
        locs = map_modules(root)
        rank = {mid: k for k, mid in enumerate(order)}
        for i, name in enumerate(layout.names):
            mod = layout.modules[i]
            loc = locs.get(name)
            own_numel = int(sum(layout.numel[j] for j in layout.own_params(i)))
            self.writer.execute(  # site and label: where the module was created, as the editor re-finds it (sourcemap.py)
                "INSERT OR REPLACE INTO modules VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (i, name, type(mod).__name__, type(mod).__module__, layout.parents[i], int(numel[i]), own_numel,
                 rank[i] if self._order_known else None, loc.file if loc else None, loc.line if loc else None,
                 loc.owner if loc else None, loc.attr if loc else None, loc.site if loc else None, loc.label if loc else None),
            )
        in_opt = self._optimizer_param_ids()
        for j, pname in enumerate(layout.param_names):
            p = layout.params[j]
            self.writer.execute(
                "INSERT OR REPLACE INTO params VALUES (?,?,?,?,?,?,?,?)",
                (j, pname, int(layout.param_module[j]), str(list(p.shape)), int(p.numel()), int(p.requires_grad), int(id(p) in in_opt), 0),
            )
        device = next((str(p.device) for p in layout.params), "cpu")
        self.writer.update_run(model=type(root).__name__, device=device)
        self._root_handle = root.register_forward_pre_hook(self._on_root_forward, with_kwargs=True)
        if self._sampled(self.step) and not found_in_step:  # found mid-step, the forward is past: _begin_step replays it
            self.recorder.arm(want_order=not self._order_known)

    def _max_window(self) -> int:
        conds = list(self.settings.conditions) + list(self.settings.breaks)
        return max([self.settings.thresholds.loss_spike_window] + [w for c in conds for w in _windows(c)])

    def _on_root_forward(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._replaying:
            self._inputs.append((self.step, args, kwargs))
        if self.recorder is not None and self.recorder.armed and self._input_stats is None:
            try:
                x = first_tensor(args) if args else first_tensor(kwargs)
                if x is not None and x.is_floating_point() and x.numel() > 1:
                    x = x.detach().float()
                    mn, mx = torch.aminmax(x)
                    self._input_stats = torch.stack([mn, mx, x.mean(), x.std(), (~torch.isfinite(x)).sum().float()])
            except Exception as exc:
                self._internal_error("input", exc)

    # -- the step ---------------------------------------------------------------
    def _sampled(self, step: int) -> bool:
        return step % self.settings.every == 0 or step <= self._capture_until or not self._order_known

    def _collect_fast(self, layout: Layout) -> tuple[gs.GradSample, dict[str, np.ndarray], float | None] | _Pending | None:
        """The common step (not sampled, every parameter has a gradient, one loss, nothing pending):
        one fused norm, one copy, one matrix product; on an accelerator the copy is read a step later
        (a :class:`_Pending`) when deferral is on. None when the general path is needed."""
        if self._prebw is not None or self._upd_ids is not None or self._input_stats is not None or len(self._losses) > 1 or layout.sparse:
            return None
        grads = [p.grad for p in layout.params]
        if not grads:
            return None
        for g in grads:  # (`None in grads` would compare tensors with ==: slow)
            if g is None:
                return None
        try:
            vec = torch.stack(torch._foreach_norm(grads))  # type: ignore[arg-type]
        except RuntimeError:  # mixed devices
            return None
        if vec.dtype != torch.float32:
            vec = vec.float()
        on_cpu = vec.device.type == "cpu"
        defer = self._deferring(vec.device)
        loss_t = self._losses[0] if self._losses else None
        if loss_t is not None and (defer or not on_cpu):  # one copy to the host for both
            if loss_t.device != vec.device:
                return None
            vec = torch.cat([vec, loss_t.reshape(1).to(torch.float32)])
        n = len(grads)
        if defer:
            return self._defer(vec, n, loss_t is not None)
        host = vec.numpy() if on_cpu else vec.cpu().numpy()
        l2 = host[:n].astype(np.float64)  # (squares of norms beyond 1.8e19 overflow float32)
        if self._explicit_loss is not None:
            loss: float | None = self._explicit_loss
        elif loss_t is None:
            loss = None
        else:
            loss = float(loss_t) if on_cpu else float(host[n])
        return gs.GradSample(layout.all_params, True, l2), _fast_mods(layout, l2), loss

    def _deferring(self, device: torch.device) -> bool:
        wanted = self.settings.defer
        if wanted is None:
            wanted = device.type == "cuda"
        if not wanted or device.type not in ("cuda", "cpu") or self._actions or self._in_step:  # (other accelerators: no events here)
            return False
        self._refresh_watches()  # a watch set from the editor turns deferral off before its step
        return not self.watch_triggers

    def _defer(self, vec: torch.Tensor, n: int, has_loss: bool) -> _Pending:
        """Start the copy of this step's values (norms, then the loss) to the host; :meth:`_finish`
        reads them a step later."""
        host, event = vec, None  # on the host already (deferral forced on for the CPU, as in tests)
        if vec.device.type == "cuda":
            if not self._ring or self._ring[0][0].shape != vec.shape:
                self._ring = [(torch.empty(vec.shape, dtype=torch.float32, pin_memory=True), torch.cuda.Event()) for _ in range(2)]
            host, event = self._ring[self._ring_next]
            self._ring_next = 1 - self._ring_next
            host.copy_(vec, non_blocking=True)
            event.record(torch.cuda.current_stream(vec.device))
        return _Pending(self.step, host, event, n, has_loss, self._explicit_loss, self._lr(), self._n_backward,
                        self._zeroed_flag({}), time.perf_counter(), time.time())

    def _finish_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._guard("step", lambda: self._finish(pending))

    def _finish(self, p: _Pending) -> None:
        """Process a deferred step now that its values are on the host."""
        layout = self.layout
        assert layout is not None
        if p.event is not None:
            p.event.synchronize()
        host = p.host.numpy().copy()  # the pinned buffer is reused two steps on
        l2 = host[: p.n].astype(np.float64)
        loss = p.explicit_loss if p.explicit_loss is not None else (float(host[p.n]) if p.has_loss else None)
        self._process(p.step, gs.GradSample(layout.all_params, True, l2), _fast_mods(layout, l2), loss, {}, [],
                      sampled=False, lr=p.lr, zeroed=p.zeroed, n_backward=p.n_backward, when=p.when, wall=p.wall)

    def _begin_step(self) -> None:
        layout, history = self.layout, self.history
        step = self.step
        t = self._transfer
        sampled = self._sampled(step)
        fast = None if sampled or layout is None else self._collect_fast(layout)
        if isinstance(fast, _Pending):  # read the previous step's values, whose copy has landed meanwhile
            previous, self._pending = self._pending, fast
            if previous is not None:
                self._finish(previous)
            return
        self._finish_pending()  # steps are processed in order
        act_ids: list[tuple[int, int, int, int]] = []
        host: dict[str, np.ndarray] = {}
        if fast is not None:
            sample, mods, loss = fast
        else:
            if len(self._losses) == 1:
                t.add("loss", self._losses[0])
            elif self._losses:
                t.add("loss", [x.float() for x in self._losses])
            if self._prebw is not None:
                t.add("prebw", [self._prebw])
            if layout is None or history is None:
                host = t.fetch()
                self._write_step(step, self._loss(host), sampled=False, grad_norm=None, grad_max=None, zeroed=self._zeroed_flag(host))
                return
            if sampled and self.recorder is not None and not self.recorder.armed and not self.recorder.rows:
                self._forward_again(step)  # the model was found after this step's forward: measure it now
            idx = gs.queue_grads(layout, t, sampled)
            if self._input_stats is not None:
                t.add("input", self._input_stats)
                self._input_stats = None
            if self.recorder is not None and (self.recorder.armed or self.recorder.rows):
                self.recorder.disarm(keep_work_space=self._sampled(step + 1))
                act_ids = self.recorder.take(t.add)
                if self.recorder.modes:
                    modes = np.full(layout.n_modules, np.nan)
                    for mid, training in self.recorder.modes.items():
                        modes[mid] = float(training)
                    self.writer.put_metric(step, "training", modes)
                if self.recorder.order and not self._order_known:
                    self._write_order(self.recorder.order)
            host = t.fetch()
            sample = gs.read_grads(layout, host, idx)
            mods = gs.per_module(layout, sample)
            mods["grad_present"] = layout.module_has_params if sample.all_present else layout.member @ sample.present.astype(np.float64)
            loss = self._loss(host)
        self._process(step, sample, mods, loss, host, act_ids, sampled=sampled, lr=self._lr(), zeroed=self._zeroed_flag(host),
                      n_backward=self._n_backward, when=time.perf_counter(), wall=time.time())

    def _process(self, step: int, sample: gs.GradSample, mods: dict[str, np.ndarray], loss: float | None, host: dict[str, np.ndarray],
                 act_ids: list[tuple[int, int, int, int]], *, sampled: bool, lr: float | None, zeroed: int | None, n_backward: int,
                 when: float, wall: float) -> None:
        """Triggers, watches, capture and the store rows of one step from its host-side values.
        ``step`` is this step, or the one before when its values were deferred (:meth:`_finish`)."""
        layout, history = self.layout, self.history
        assert layout is not None and history is not None
        present = sample.present
        if sample.all_present:  # the root module holds every parameter: its norm is the global one
            gnorm: float | None = float(mods["grad_norm"][0]) if len(sample.l2) else None
        else:
            gnorm = math.sqrt(float(np.nansum(np.where(present, sample.l2 * sample.l2, 0.0)))) if present.any() else None
        gmax = float(np.max(np.where(np.isnan(sample.linf), -np.inf, sample.linf))) if sample.linf is not None and present.any() else None
        if loss is not None and math.isfinite(loss) and len(self._loss_start) < LOSS_SCALE_STEPS:
            self._loss_start.append(abs(loss))
            self._loss_scale = float(np.median(self._loss_start))
        scalars: dict[str, float] = {"step": float(step), "loss": _nan(loss), "lr": _nan(lr), "loss_scale": self._loss_scale,
                                     "grad_norm": _nan(gnorm), "grad_max": _nan(gmax),
                                     "loss_nonfinite": float(loss is not None and not math.isfinite(loss)),
                                     "grad_nonfinite": float(gnorm is not None and not math.isfinite(gnorm)),
                                     "first_nonfinite_module": math.nan}
        if scalars["grad_nonfinite"]:  # (a deferred step's gradients are gone: at least one per non-finite norm)
            counts = gs.nonfinite_counts(layout, sample) if step == self.step else np.where(
                sample.present & ~np.isfinite(sample.l2), 1.0, 0.0)
            if counts is not None:
                mods["nan_count"] = layout.member @ counts
        if act_ids:
            acts, first_bad = act.aggregate(layout.n_modules, act_ids, host["act"])
            mods.update(acts)
            mods["nan_count"] = mods.get("nan_count", 0.0) + np.fmax(acts["act_nan"], 0.0)  # (fmax: NaN -> 0)
            if first_bad is not None:
                scalars["first_nonfinite_module"] = float(first_bad)
        upd = self._write_updates(host)
        if upd is not None:
            mods["update_ratio"] = upd
        if sampled or len(mods) > 2:
            _global_from_modules(scalars, mods, layout)
        else:
            scalars["nan_count"] = scalars["grad_nonfinite"]
        history.push(StepValues(step, scalars, mods))
        fired = self._evaluate(history)
        anomalies = [f for f in fired if f.trigger in self.triggers]
        capture = step <= self._capture_until
        if anomalies and not capture:
            # a deferred step is past: capture the step at hand (its gradients and input are still here),
            # unless the run is closing and no later step ran
            at = self.step if self._inputs and self._inputs[-1][0] == self.step else step
            self._capture_until = at + self.settings.capture_window
            replay_first = self._capture(at, anomalies, mods, history)
            if replay_first is not None:
                for f in anomalies:
                    if f.trigger == "nan_inf":
                        f.module = layout.names[replay_first]
                        f.message += f"; first non-finite output in {layout.names[replay_first]!r}"
            capture = True
        for f in anomalies:
            self.anomalies.append((step, f.trigger))
            self.writer.put_event(step, EVENT_TRIGGER, f.trigger, module=f.module, condition=f.condition, value=f.value,
                                  message=f.message, data={"capture_until": self._capture_until, **({"captured_at": self.step} if step != self.step else {})})
        self._write_step(step, loss, sampled=sampled, grad_norm=gnorm, grad_max=gmax, zeroed=zeroed, capture=capture, lr=lr,
                         n_backward=n_backward, when=when, wall=wall)
        for kind in ("grad_norm", "grad_max", "grad_mean", "grad_zero_frac", "weight_norm", "nan_count", *act.FIELDS):
            if kind in mods:
                self.writer.put_metric(step, kind, mods[kind])
        self.writer.put_metric(step, "param_grad_norm", sample.l2)
        if "input" in host:
            self.writer.put_metric(step, "input_stats", host["input"])
        if self.recorder is not None and self.recorder.loss_modules - self._loss_modules_seen:
            self._loss_modules_seen |= self.recorder.loss_modules
            self.writer.update_run(loss_module=",".join(sorted(self._loss_modules_seen)))
        if sampled and step >= self._params_due:  # (parameters' set-up rarely changes: not at every step of full detail)
            self._params_due = step + DEFAULT_EVERY
            self._update_params(sample.present)
        primary = self._primary() if self._primary is not None else None
        if sampled and primary is not None:
            in_opt = {id(p) for g in primary.param_groups for p in g["params"]}
            ids = [j for j, p in enumerate(layout.params) if id(p) in in_opt and sample.present[j]]
            self._updates.before(layout, ids)

    def _end_step(self) -> None:
        layout = self.layout
        if layout is not None:
            ids = self._updates.after(layout, self._transfer, keep=self._sampled(self.step + 1))
            if ids is not None:
                self._upd_ids, self._upd_step = ids, self.step
        self.step += 1
        if self.step % OVERHEAD_WINDOW == 0:
            self._check_overhead()
        self._losses = []
        self._explicit_loss = None
        self._n_backward = 0
        self._zeroed = None
        self._prebw = None
        if self.recorder is not None and self._sampled(self.step):
            self.recorder.arm(want_order=not self._order_known)
        if self.progress is not None:
            try:
                self.progress(self)
            except Exception:
                pass

    def _run_actions(self) -> None:
        actions, self._actions = self._actions, []
        for a in actions:
            f = a.fired
            where = f" in {f.module!r}" if f.module else ""
            value = f" ({_fmt(f.value)})" if f.value is not None else ""
            msg = f"gradsight: breakpoint {f.condition}{where}{value} at step {self.step - 1}"
            if a.kind == "pause":
                print(msg + ": pausing in your training loop", file=sys.stderr, flush=True)
                pause(a.frame)
            else:
                self.writer.flush()
                raise GradsightStop(msg + f"; run stopped, snapshot in {self.store_path}")

    def _evaluate(self, history: History) -> list[Fired]:
        fired: list[Fired] = []
        if self._quick.quiet(history):
            for trig in self._layer_triggers:
                trig.quiet_step(history)
            checks = self._other_triggers
        else:
            checks = list(self.triggers.values())
        for trig in checks:
            hit = trig(history)
            if hit is not None:
                fired.append(hit)
        self._refresh_watches()
        attached = None
        for trig, is_break in self.watch_triggers:
            hit = trig(history)
            if hit is None:
                continue
            if attached is None:
                attached = debugger_attached()
            self.writer.put_event(self.step, EVENT_BREAKPOINT, "break" if is_break else "watch", module=hit.module,
                                  condition=hit.condition, value=hit.value,
                                  message=hit.message + ("" if attached else " (no debugger attached)"))
            if attached:
                self._actions.append(_Action(hit, "pause", user_frame()))
            elif is_break:
                self._actions.append(_Action(hit, "stop"))
        return fired

    def _refresh_watches(self) -> None:
        version, rows = self.writer.watches
        if version == self._watch_version:
            return
        self._watch_version = version
        keep: list[tuple[Trigger, bool]] = [(t, b) for t, b in self.watch_triggers if b]
        for wid, text, module, _file, _line in rows:
            try:
                cond = parse(text)
            except ConditionError as exc:
                self.writer.put_event(self.step, EVENT_WARNING, "bad_watch", condition=text, message=str(exc))
                continue
            keep.append((Trigger(f"watch {wid}", condition_check(cond, cond.text, scope=module or None), 1), False))
        self.watch_triggers = keep

    # -- capture ----------------------------------------------------------------
    def _capture(self, step: int, fired: list[Fired], mods: dict[str, np.ndarray], history: History) -> int | None:
        """Whole tensors of the worst modules at the trigger step, within the memory cap."""
        layout = self.layout
        assert layout is not None
        budget = self.settings.capture_bytes
        worst = _worst_modules(layout, fired, mods, history, self._own)
        for mid in worst:
            for j in sorted(layout.own_params(mid), key=lambda j: -layout.numel[j])[:1]:
                p = layout.params[j]
                for role, tensor in (("gradient", p.grad), ("weight", p.detach())):
                    if tensor is None or budget <= 0:
                        continue
                    arr = act._fit(tensor.detach().float().cpu().numpy(), budget)
                    budget -= arr.nbytes
                    self.writer.put_tensor(step, layout.names[mid], role, arr)
        for mid, mod in enumerate(layout.modules):  # embeddings, for projections
            if isinstance(mod, nn.Embedding) and budget > 0:
                arr = act._fit(mod.weight.detach().float().cpu().numpy(), min(budget, 8 * 2**20))
                budget -= arr.nbytes
                self.writer.put_tensor(step, layout.names[mid], "weight", arr)
        for in_step, args, kwargs in list(self._inputs):
            x = first_tensor(args) if args else first_tensor(kwargs)
            if x is not None and budget > 0:
                arr = act._fit(x.detach().cpu().numpy(), min(budget, 4 * 2**20))
                budget -= arr.nbytes
                self.writer.put_tensor(in_step, "", "input", arr)
        interesting = set(worst) | {i for i, m in enumerate(layout.modules)
                                    if isinstance(m, (nn.Softmax, nn.Embedding, nn.MultiheadAttention)) or "attn" in layout.names[i].rsplit(".", 1)[-1].lower()}
        return self._replay(step, interesting, budget)

    def _forward_again(self, step: int) -> bool:
        """Re-run this step's forward (no grad, RNG and buffers restored) with the recorder armed;
        its rows stay in the recorder. False when the step's input is not at hand."""
        if not self._inputs or self._inputs[-1][0] != step or self.recorder is None or self.layout is None:
            return False
        _, args, kwargs = self._inputs[-1]
        root = self.layout.root
        saved = [b.detach().clone() for b in root.buffers()]
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        try:
            self.recorder.arm(want_order=not self._order_known)
            self._replaying = True
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                root(*args, **kwargs)
        except Exception as exc:
            self.writer.put_event(step, EVENT_WARNING, "replay_failed", message=f"could not replay the forward pass: {exc!r}")
            self.recorder.rows = []
            return False
        finally:
            self._replaying = False
            self.recorder.disarm()
            with torch.no_grad():
                for b, s in zip(root.buffers(), saved):
                    b.copy_(s)
        return True

    def _replay(self, step: int, capture: set[int], budget: int) -> int | None:
        """Re-run the trigger step's forward to capture its activations (statistics and whole tensors)."""
        rec = self.recorder
        if rec is None or self.layout is None:
            return None
        rec.capture, rec.capture_budget, rec.captured = capture, budget, []
        if not self._forward_again(step):
            rec.capture, rec.captured = set(), []
            return None
        t = gs.Transfer()
        ids = rec.take(t.add)
        if self._input_stats is not None:  # the replayed step's input statistics
            t.add("input", self._input_stats)
            self._input_stats = None
        for mid, arr in rec.captured:
            self.writer.put_tensor(step, self.layout.names[mid], "activation", arr)
        rec.capture, rec.captured = set(), []
        if not ids:
            return None
        host = t.fetch()
        if "input" in host:
            self.writer.put_metric(step, "input_stats", host["input"])
        acts, first_bad = act.aggregate(self.layout.n_modules, ids, host["act"])
        for kind, values in acts.items():
            self.writer.put_metric(step, kind, values)
        return first_bad

    # -- small helpers ------------------------------------------------------------
    def _loss(self, host: dict[str, np.ndarray]) -> float | None:
        if self._explicit_loss is not None:
            return self._explicit_loss
        losses = host.get("loss")
        if losses is None or not len(losses):
            return None
        return float(losses[0]) if len(losses) == 1 else float(losses.astype(np.float64).mean())

    def _zeroed_flag(self, host: dict[str, np.ndarray]) -> int | None:
        if self._zeroed:
            return 1
        pre = host.get("prebw")
        if pre is not None and len(pre):
            return int(pre[0] == 0)
        return None

    def _lr(self) -> float | None:
        opt = self._primary() if self._primary is not None else None
        if opt is None or not opt.param_groups:
            return None
        lr = opt.param_groups[0].get("lr")
        return float(lr) if lr is not None else None

    def _write_step(self, step: int, loss: float | None, *, sampled: bool, grad_norm: float | None, grad_max: float | None,
                    zeroed: int | None, capture: bool = False, lr: float | None = None, n_backward: int | None = None,
                    when: float | None = None, wall: float | None = None) -> None:
        now = time.perf_counter() if when is None else when
        if lr is None:
            lr = self._lr()
        finite = None if loss is None else int(math.isfinite(loss))
        self.writer.execute(_STEP_SQL, (step, time.time() if wall is None else wall, now - self._last_time, loss, lr, grad_norm, grad_max,
                                        int(sampled), self._n_backward if n_backward is None else n_backward, zeroed, int(capture), finite))
        self._last_time = now

    def _write_updates(self, host: dict[str, np.ndarray]) -> np.ndarray | None:
        """The update ratio of the last sampled step, whose values came with this transfer."""
        if self._upd_ids is None or "upd_delta" not in host or self.layout is None:
            return None
        upd = gs.update_ratio(self.layout, self._upd_ids, host["upd_delta"], host["upd_weight"])
        self.writer.put_metric(self._upd_step, "update_ratio", upd)
        self._upd_ids = None
        return upd

    def _write_order(self, order: list[int]) -> None:
        assert self.layout is not None
        seen = list(dict.fromkeys(order))
        rest = [i for i in range(self.layout.n_modules) if i not in set(seen)]
        for rank, mid in enumerate(seen + rest):
            self.writer.execute("UPDATE modules SET forward_order = ? WHERE id = ?", (rank, mid))
        self._order_known = True

    def _update_params(self, present: np.ndarray) -> None:
        layout = self.layout
        assert layout is not None
        in_opt = self._optimizer_param_ids()
        unstepped = []
        for j, p in enumerate(layout.params):
            state = (int(p.requires_grad), int(id(p) in in_opt), int(present[j]))
            old = self._params_state.get(j)
            if old is not None:
                state = (state[0], state[1], max(state[2], old[2]))
            if state != old:
                self._params_state[j] = state
                self.writer.execute("UPDATE params SET trainable = ?, in_optimizer = ?, got_grad = ? WHERE id = ?", (*state, j))
            if state[2] and not state[1] and self._primary is not None:
                unstepped.append(layout.param_names[j])
        if unstepped and not self._warned_unstepped:
            self._warned_unstepped = True
            self.writer.put_event(self.step, EVENT_WARNING, "not_updated", message=(
                f"{len(unstepped)} parameters receive gradients but no optimizer updates them: {', '.join(unstepped[:5])}"
                + (" ..." if len(unstepped) > 5 else "")))

    def _timed_step(self, fn: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        if self._started is None:
            self._started = t0
        self._guard("step", fn)
        self._own_steps += time.perf_counter() - t0

    def _own_seconds(self) -> float:
        """Seconds of gradsight's own work on the training thread so far."""
        return self._own_steps + (self.recorder.spent if self.recorder is not None else 0.0)

    def own_share(self) -> float | None:
        """gradsight's own time on the training thread over the rest of the run's time since its first
        step (to the close, once closed): 0.04 means it made the run 4% longer. None before a step."""
        if self._started is None:
            return None
        own = self._own_seconds()
        rest = (self._closed_at or time.perf_counter()) - self._started - own
        return own / rest if rest > 0 else None

    def _check_overhead(self) -> None:
        """At the end of each window of steps: gradsight's own share of the training thread's time
        (step callbacks and activation hooks), reported once when it slows training noticeably."""
        now, total = time.perf_counter(), self._own_seconds()
        first, start, before = self._window
        self._window = (self.step, now, total)
        own = total - before
        steps = self.step - first
        rest = now - start - own
        if self._overhead_warned or first == 0 or steps <= 0 or rest <= 0:  # (the first window holds the session's start)
            return
        share, per_step = own / rest, own / steps * 1000
        if share <= OVERHEAD_SHARE or per_step <= OVERHEAD_MIN_MS:
            return
        self._overhead_warned = True
        every = self.settings.every
        hint = (f"activation statistics every {every} step{'s' if every > 1 else ''}: a larger every (--every) lowers it"
                if every < DEFAULT_EVERY else "most of it is per-step gradient statistics, which grow with the number of parameter tensors")
        what = f"own work made steps {first}-{self.step - 1} {1 + share:.2g}x slower ({per_step:.1f} ms a step; {hint})"
        print(f"gradsight: its {what}", file=sys.stderr, flush=True)
        self.writer.put_event(self.step - 1, EVENT_WARNING, "overhead", value=share, message=f"gradsight's {what}",
                              data={"steps": [first, self.step - 1], "ms_per_step": per_step, "every": every})

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
            print(f"gradsight: internal error in {where} ({exc!r}); collection degraded, training continues", file=sys.stderr)
            try:
                self.writer.put_event(self.step, EVENT_WARNING, "internal_error", message=f"{where}: {exc!r}")
            except Exception:
                pass
        if where == "step":
            self._broken = True
            if self.recorder is not None:
                self.recorder.disarm()


def _windows(cond: Condition) -> list[int]:
    from ..conditions.parser import Window

    out: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, Window):
            out.append(node.n)
        for child in getattr(node, "__dict__", {}).values():
            if isinstance(child, tuple):
                for c in child:
                    walk(c)
            elif hasattr(child, "__dataclass_fields__"):
                walk(child)

    walk(cond.root)
    return out


def _fast_mods(layout: Layout, l2: np.ndarray) -> dict[str, np.ndarray]:
    """Per-module gradient norms of a step where every parameter has a gradient."""
    norm = gs.module_norms(layout.member, l2)
    norm[layout.no_params] = np.nan
    return {"grad_norm": norm, "grad_present": layout.module_has_params}


def _is_leaf(m: nn.Module) -> bool:
    return next(iter(m.children()), None) is None


def _nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


# how an activation statistic of the whole model follows from its modules' values
_WHOLE_MODEL = {"act_max": "max", "act_min": "min", "act_std": "max", "dead_frac": "max", "sat_frac": "max", "act_mean": "mean"}


def _global_from_modules(scalars: dict[str, float], mods: dict[str, np.ndarray], layout: Layout) -> None:
    """Whole-model values of layer metrics, read by unscoped conditions."""
    with np.errstate(invalid="ignore", divide="ignore"):
        root = 0  # the root module contains every parameter
        for kind in ("grad_mean", "grad_zero_frac", "weight_norm", "update_ratio"):
            if kind in mods and len(mods[kind]):
                scalars[kind] = float(mods[kind][root])
        kinds = [k for k in _WHOLE_MODEL if k in mods]
        if kinds:  # one reduction per statistic over all of them (NaN: no value), not one per kind
            table = np.stack([mods[k] for k in kinds])
            finite = np.isfinite(table).any(axis=1)
            high, low = np.fmax.reduce(table, axis=1), np.fmin.reduce(table, axis=1)
            known = ~np.isnan(table)
            mean = np.where(known, table, 0.0).sum(axis=1) / known.sum(axis=1)
            for r, kind in enumerate(kinds):
                if finite[r]:
                    how = _WHOLE_MODEL[kind]
                    scalars[kind] = float(high[r] if how == "max" else low[r] if how == "min" else mean[r])
        if "nan_count" in mods:
            own = layout.owns_params  # each parameter counted once, at its owner
            scalars["nan_count"] = float(np.nansum(np.where(own, mods["nan_count"], 0.0)))
        else:
            scalars["nan_count"] = 0.0 if math.isfinite(scalars.get("grad_norm", 0.0)) else 1.0


def _worst_modules(layout: Layout, fired: list[Fired], mods: dict[str, np.ndarray], history: History, own: np.ndarray) -> list[int]:
    """Modules to capture: those named by the triggers, then the largest growth of gradient norm."""
    out: list[int] = []
    for f in fired:
        if f.module is not None and f.module in history.index:
            i = history.index[f.module]
            if own[i] and i not in out:
                out.append(i)
    norms = mods.get("grad_norm")
    if norms is not None:
        past = [sv.modules["grad_norm"] for sv in list(history.steps)[-21:-1] if "grad_norm" in sv.modules]
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            base = np.nanmedian(np.stack(past), axis=0) if past else np.ones_like(norms)
            growth = np.where(np.isfinite(norms), norms / np.where(base > 0, base, np.nan), np.inf)
        growth = np.where(own[: len(growth)], np.nan_to_num(growth, nan=-1.0, posinf=1e30), -1.0)
        for i in np.argsort(-growth):
            if len(out) >= CAPTURE_MODULES or growth[i] < 0:
                break
            if int(i) not in out:
                out.append(int(i))
    return out[:CAPTURE_MODULES]
