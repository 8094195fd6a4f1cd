"""What a fix may assume: facts of the run (its records) and of the script (its code), and the named
premises the library's fixes declare in ``needs``. A fix is offered only when every premise it needs holds.

Premises read records, never the names in a diagnosis's evidence text: a fix for a learning-rate jump
needs a jump in the lr column, a fix that removes a softmax needs a softmax in the code that feeds the loss.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from .. import kinds, pairing
from ..analysis import attention
from ..analysis.data import RunData
from ..analysis.findings import Finding
from ..analysis.rootcause import RootCause
from ..script import ADAPTIVE, BINARY_LOSSES, CLASSIFICATION_LOSSES, REGRESSION_LOSSES, Script
from . import sites


def _finite(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return a[np.isfinite(a)]


@dataclass
class Target:
    """What a fix is for: a finding's kind at a module (or at loss / optimizer / input)."""

    kind: str
    module: str
    evidence: str = ""
    step: int | None = None


@dataclass
class Context:
    target: Target
    data: RunData
    script: Script
    findings: list[Finding] = field(default_factory=list)
    cause: RootCause | None = None

    # -- the run -----------------------------------------------------------------------
    @cached_property
    def lr(self) -> np.ndarray:
        return _finite(self.data.steps["lr"])

    @cached_property
    def groups(self) -> list[dict[str, Any]]:
        opts = self.data.optimizers
        return [g for g in opts[0].get("groups", []) if isinstance(g, dict)] if opts else []

    @property
    def optimizer_type(self) -> str:
        return str(self.data.run.get("optimizer") or "")

    def hyper(self, name: str) -> float | None:
        """A hyperparameter of the primary optimizer's first group, as the run recorded it."""
        for g in self.groups:
            v = g.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
            if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
                return float(v[-1]) if name == "betas" else float(v[0])
        return None

    def hypers(self, name: str) -> list[float]:
        """A hyperparameter of every parameter group of the primary optimizer, as recorded."""
        out = []
        for g in self.groups:
            v = g.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append(float(v))
        return out

    @cached_property
    def initial_lr(self) -> float | None:
        v = self.hyper("initial_lr")
        if v is None and len(self.lr):
            v = float(self.lr[0])
        return v

    @cached_property
    def update_ratio(self) -> float | None:
        """The typical update ratio (|update| / |weights|) of the layers over the run's first measured steps:
        what the learning rate does before a fault's consequences take over."""
        steps, mat = self.data.metric("update_ratio")
        if not mat.size:
            return None
        own = self.data.own_layers()
        rows = np.asarray(mat[: max(3, len(steps) // 4)][:, own] if own else mat[:3], dtype=np.float64)
        ok = rows[np.isfinite(rows) & (rows > 0)]
        return float(np.median(ok)) if ok.size else None

    @cached_property
    def grad_norms(self) -> np.ndarray:
        return _finite(self.data.steps["grad_norm"])

    def column(self, name: str) -> np.ndarray:
        col = self.data.steps.get(name)
        return _finite(col) if col is not None else np.zeros(0)

    @cached_property
    def loss_calls(self) -> list[dict[str, Any]]:
        return [o.data for o in self.data.observed("loss")]

    def loss_is(self, names: set[str]) -> bool:
        seen = {str(c.get("loss", "")) for c in self.loss_calls} | {str(self.data.run.get("loss_module") or "")}
        seen |= {self.script.loss_name(c) for c in self.script.loss_calls()}
        return bool(seen & names)

    @cached_property
    def inputs(self) -> np.ndarray:
        """Rows of (min, max, mean, std, non-finite) of the model's input at measured steps."""
        return np.asarray(self.data.input_stats[1], dtype=np.float64)

    @property
    def input_arg(self) -> int | str | None:
        """Which argument of the model's call the input statistics are of (None: not recorded, the first)."""
        v = self.data.run.get("input_arg")
        if v is None or v == "":
            return None
        return int(v) if str(v).isdigit() else str(v)

    @property
    def first_module(self) -> str:
        ranked = sorted((m for m in self.data.modules if m.forward_order is not None and m.own_params), key=lambda m: m.forward_order or 0)
        return ranked[0].type if ranked else ""

    def module_type(self, name: str) -> str | None:
        i = self.data.index.get(name)
        return self.data.modules[i].type if i is not None else None

    def module_in_script(self, name: str) -> bool:
        """The module is created by a line of this script (not inside an installed library)."""
        i = self.data.index.get(name)
        if i is None or not self.script.path:
            return False
        m = self.data.modules[i]
        return bool(m.file and m.line and _same(m.file, self.script.path))

    def params(self, **want: int) -> list[dict[str, Any]]:
        return [p for p in self.data.params if all(p.get(k) == v for k, v in want.items())]

    def series(self, kind: str, module: str) -> np.ndarray:
        if module not in self.data.index:
            return np.zeros(0)
        return _finite(self.data.series(kind, module)[1])

    def has_finding(self, *wanted: str) -> bool:
        return any(f.kind in wanted for f in self.findings) or (self.cause is not None and self.cause.kind in wanted)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


# -- premises ---------------------------------------------------------------------------------------------
Premise = Callable[[Context], bool]
PREMISES: dict[str, Premise] = {}


def premise(fn: Premise) -> Premise:
    PREMISES[fn.__name__] = fn
    return fn


@premise
def has_optimizer(c: Context) -> bool:
    return c.script.optimizer is not None


@premise
def has_loop(c: Context) -> bool:
    return c.script.loop is not None and bool(c.script.backward_calls)


@premise
def has_model(c: Context) -> bool:
    return c.script.model_var(str(c.data.run.get("model") or "")) is not None


@premise
def has_scheduler(c: Context) -> bool:
    return bool(c.script.schedulers)


@premise
def no_scheduler(c: Context) -> bool:
    return not c.script.schedulers


@premise
def lr_jump(c: Context) -> bool:
    """The rate rose by 5x or more from one step to the next."""
    lr = c.lr
    return len(lr) > 2 and bool(np.any(lr[1:] > 5 * np.maximum(lr[:-1], 1e-12)))


@premise
def lr_set_in_loop(c: Context) -> bool:
    return bool(c.script.lr_assignments_in_loop())


@premise
def lr_above_initial(c: Context) -> bool:
    """A schedule took the rate well above the rate the optimizer was built with."""
    base = c.initial_lr
    return base is not None and base > 0 and len(c.lr) > 0 and float(c.lr.max()) > 2.0 * base


@premise
def lambda_scheduler(c: Context) -> bool:
    return any(s.ctor in ("LambdaLR", "MultiplicativeLR") for s in c.script.schedulers)


@premise
def lr_decays_to_zero(c: Context) -> bool:
    """The schedule holds the rate near zero (below 5% of its start) for a quarter of the run or more: it ended early
    (a decay to zero at the run's very end is the schedule working)."""
    base = c.initial_lr
    return base is not None and base > 0 and len(c.lr) > 3 and float(np.mean(c.lr < 0.05 * base)) >= 0.25


@premise
def epoch_scheduler_per_batch(c: Context) -> bool:
    """A scheduler meant to step once an epoch steps inside the loop over batches, and an epoch loop exists."""
    return bool(c.script.epoch_scheduler_steps_per_batch())


@premise
def scheduler_steps(c: Context) -> bool:
    return bool(c.script.scheduler_step_calls())


@premise
def lr_settable(c: Context) -> bool:
    """The script sets the rate in code gradsight can change: the optimizer's constructor (or a cyclic scheduler's max_lr)."""
    return bool(c.script.lr_nodes())


@premise
def update_ratio_high(c: Context) -> bool:
    r = c.update_ratio
    return r is None or r > 3e-3 or c.has_finding(kinds.UPDATE_RATIO_TOO_HIGH)


@premise
def update_ratio_low(c: Context) -> bool:
    """Updates far below the ~1e-3 of the weights a healthy step makes (below 1e-4; below 1e-3 when the diagnosis
    itself found the rate too low: it read more than the update ratio)."""
    r = c.update_ratio
    low = 1e-3 if c.target.kind == kinds.LEARNING_RATE_TOO_LOW and c.target.module == kinds.OPTIMIZER else 1e-4
    return r is not None and r < low


@premise
def lr_not_decayed(c: Context) -> bool:
    """The rate spent most of the run near where it started (a schedule that ends low is fine; one that took the
    rate away early is the schedule's fault, for which other fixes exist)."""
    base = c.initial_lr
    return not (base and len(c.lr) and float(np.median(c.lr)) < 0.1 * base)


@premise
def schedule_ends_early(c: Context) -> bool:
    """The schedule took the rate to its floor (below 15% of its peak) before half the run, kept it there, and the
    script tells the schedule its length: a horizon shorter than the run."""
    lr = c.lr
    if len(lr) < 10 or not np.isfinite(lr).all() or float(lr.max()) <= 0:
        return False
    peak = int(np.argmax(lr))  # (after a warmup's low start)
    low = lr[peak:] < 0.15 * float(lr.max())
    at = peak + int(np.argmax(low)) if low.any() else len(lr)
    return at < 0.5 * len(lr) and bool(low[at - peak:].mean() >= 0.9) and bool(c.script.schedule_horizons())


@premise
def scheduler_per_micro_batch(c: Context) -> bool:
    """A scheduler steps inside the loop over micro-batches: several times per optimizer step."""
    return bool(c.script.scheduler_steps_per_micro_batch())


@premise
def adaptive_optimizer(c: Context) -> bool:
    return c.optimizer_type in ADAPTIVE


@premise
def adaptive_lr_high(c: Context) -> bool:
    lr = c.initial_lr
    return c.optimizer_type in ADAPTIVE and lr is not None and lr > 3e-3


@premise
def no_clipping(c: Context) -> bool:
    return not c.script.calls_named("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grad_value")


@premise
def clip_norm_strong(c: Context) -> bool:
    """clip_grad_norm_'s max_norm is far below the gradient's usual norm: every step is scaled down."""
    clip, g = c.column("clip_norm"), c.grad_norms
    return (bool(len(clip)) and bool(len(g)) and float(np.median(g)) > 5 * float(np.median(clip))
            and bool(c.script.calls_named("clip_grad_norm_", "clip_grad_norm")))


@premise
def clip_value_strong(c: Context) -> bool:
    """clip_grad_value_'s value is far below the gradients' usual largest entry."""
    clip, gmax = c.column("clip_value"), c.column("grad_max")
    return (bool(len(clip)) and bool(len(gmax)) and float(np.median(gmax)) > 5 * float(np.median(clip))
            and bool(c.script.calls_named("clip_grad_value_")))


@premise
def eps_high(c: Context) -> bool:
    eps = c.hyper("eps")
    return eps is not None and eps >= 1e-3 and c.optimizer_type in ADAPTIVE


@premise
def weight_decay_high(c: Context) -> bool:
    """A decay above what is usual; where the run showed the decay dominating the updates (Adam's coupled L2
    of 1e-2 under a small gradient, say), any decay above the typical value the fix sets."""
    adamw = c.optimizer_type == "AdamW"
    limit = (0.01 if adamw else 1e-4) if c.target.kind == "weight_decay_too_high" else (0.1 if adamw else 1e-2)
    return any(wd > limit for wd in c.hypers("weight_decay"))


@premise
def weight_decay_negative(c: Context) -> bool:
    """Some parameter group decays its weights by a negative amount: they grow every step."""
    return any(wd < 0 for wd in c.hypers("weight_decay"))


@premise
def explicit_l2_penalty(c: Context) -> bool:
    return bool(c.script.l2_penalty_terms())


@premise
def momentum_extreme(c: Context) -> bool:
    m = c.hyper("momentum")
    b = c.hyper("betas")
    return (m is not None and m >= 0.995) or (b is not None and b < 0.9)


@premise
def grads_accumulate(c: Context) -> bool:
    """Gradients were never zeroed between steps (the runtime saw every step's gradients add up)."""
    z = c.data.steps.get("grads_zeroed")
    return c.has_finding(kinds.GRADS_NOT_ZEROED) or (z is not None and len(_finite(z)) > 2 and float(np.nanmean(_finite(z))) < 0.5)


@premise
def zero_grad_misplaced(c: Context) -> bool:
    """A zero_grad between the backward() and the step() wipes the gradients the step should use; none in the loop, or
    only outside the loop that steps, lets them add up."""
    s = c.script
    return s.zero_grad_between_backward_and_step() or not s.zero_grad_calls_in_loop() or s.zero_grad_outside_step_loop()


@premise
def step_before_backward(c: Context) -> bool:
    return c.script.step_before_backward() is not None


@premise
def accumulation_unscaled(c: Context) -> bool:
    nb = c.column("n_backward")
    return bool(len(nb)) and float(np.median(nb)) > 1.5 and not c.script.backward_divided()


@premise
def detach_in_forward(c: Context) -> bool:
    """A detach() in the forward, and trainable parameters that never got a gradient (what a cut graph leaves)."""
    return bool(c.script.detach_calls()) and bool(c.params(trainable=1, got_grad=0))


@premise
def no_grad_in_forward(c: Context) -> bool:
    """A no_grad block in the forward, and trainable parameters that never got a gradient (a teacher run under
    no_grad beside its student is not one)."""
    return bool(c.script.no_grad_blocks() or c.script.no_grad_decorators()) and bool(c.params(trainable=1, got_grad=0))


@premise
def params_not_in_optimizer(c: Context) -> bool:
    """Trainable parameters the optimizer does not hold (of an optimizer that stepped: one that never did recorded
    no parameter as held)."""
    return c.data.n_steps > 0 and bool(c.params(trainable=1, in_optimizer=0))


@premise
def layers_in_plain_container(c: Context) -> bool:
    """The run found parameters kept in a plain list or dict of a model (they get gradients and are never stepped),
    and the script assigns that container in the model's class."""
    return bool(sites.plain_containers(c))


@premise
def optimizer_on_other_model(c: Context) -> bool:
    """Every parameter the optimizer holds is frozen, and the training step runs (outside no_grad) another model the
    optimizer was not given: it was built over the wrong model's parameters (the teacher's for its student's)."""
    held = c.params(in_optimizer=1)
    return bool(held) and not c.params(in_optimizer=1, trainable=1) and bool(_other_models(c))


def _other_models(c: Context) -> list[str]:
    o = c.script.optimizer
    return [m for m in c.script.models_trained_in_loop() if o is not None and o.models and m not in o.models]


@premise
def params_frozen(c: Context) -> bool:
    return bool(c.params(trainable=0))


@premise
def freeze_statement(c: Context) -> bool:
    return bool(c.script.freeze_statements())


@premise
def model_rebuilt_after_optimizer(c: Context) -> bool:
    return c.script.model_reassigned_after_optimizer() is not None


@premise
def module_eval_mode(c: Context) -> bool:
    """Some module ran in eval mode during training steps (a BatchNorm or Dropout that does not train)."""
    steps, mat = c.data.metric("training")
    return bool(mat.size) and bool(np.nanmin(np.asarray(mat, dtype=np.float64)) < 0.5) and bool(c.script.eval_calls())


@premise
def low_precision_weights(c: Context) -> bool:
    return bool(c.script.model_casts())


@premise
def softmax_before_loss(c: Context) -> bool:
    return bool(sites.output_activations(c, {"softmax", "Softmax"}))


@premise
def softmax_before_nll(c: Context) -> bool:
    return c.loss_is({"nll_loss", "NLLLoss"}) and bool(sites.output_activations(c, {"softmax", "Softmax"}))


@premise
def scheduler_never_stepped(c: Context) -> bool:
    """A scheduler built and never stepped, and a rate the run recorded as constant (its first factor)."""
    lr = c.column("lr")
    lr = lr[np.isfinite(lr)] if len(lr) else lr
    flat = bool(len(lr)) and float(lr.max()) <= 1.01 * float(lr.min())
    return flat and bool(c.script.unstepped_schedulers())


@premise
def softmax_over_batch(c: Context) -> bool:
    return bool(c.script.softmax_over_batch())


@premise
def sigmoid_before_loss(c: Context) -> bool:
    return bool(sites.output_activations(c, {"sigmoid", "Sigmoid"}))


@premise
def sigmoid_output_for_regression(c: Context) -> bool:
    """A sigmoid on the output of a regression: predictions stuck in (0, 1)."""
    return c.loss_is(REGRESSION_LOSSES) and bool(sites.output_activations(c, {"sigmoid", "Sigmoid"}))


@premise
def logits_loss(c: Context) -> bool:
    return c.loss_is({"cross_entropy", "CrossEntropyLoss", "binary_cross_entropy_with_logits", "BCEWithLogitsLoss"})


@premise
def classification_loss(c: Context) -> bool:
    return c.loss_is(CLASSIFICATION_LOSSES)


@premise
def regression_loss(c: Context) -> bool:
    return c.loss_is(REGRESSION_LOSSES)


@premise
def binary_loss(c: Context) -> bool:
    return c.loss_is(BINARY_LOSSES)


@premise
def class_index_targets(c: Context) -> bool:
    """A regression loss given integer targets in [0, C) where the output has C > 1 columns: class labels."""
    return any(class_indices(o) for o in c.loss_calls)


REGRESSION_CALLS = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"}


def class_indices(o: dict[str, Any]) -> bool:
    """One observed loss call: a regression loss given class indices (a cross-entropy beside it is not one)."""
    shape, tshape = o.get("input_shape") or [], o.get("target_shape") or []
    return bool(o.get("loss") in REGRESSION_CALLS and o.get("target_integral") and shape and len(shape) >= 2 and int(shape[-1]) > 1
                and len(tshape) == len(shape) - 1 and 0 <= float(o.get("target_min", -1)) and float(o.get("target_max", 1e9)) < int(shape[-1]))


def broadcasts(o: dict[str, Any]) -> bool:
    """One observed loss call whose input and target differ in shape but hold as many elements: [B, 1] against [B]."""
    a, b = o.get("input_shape") or [], o.get("target_shape") or []
    return bool(a and b and list(a) != list(b) and math.prod(a) == math.prod(b))


@premise
def binary_targets_out_of_range(c: Context) -> bool:
    for o in c.loss_calls:
        if str(o.get("loss", "")) in BINARY_LOSSES and (float(o.get("target_min", 0)) < 0 or float(o.get("target_max", 1)) > 1):
            return True
    return False


@premise
def shapes_broadcast(c: Context) -> bool:
    """The loss's input and target differ in shape but hold as many elements: [B, 1] against [B]."""
    return any(broadcasts(o) for o in c.loss_calls)


@premise
def summed_loss(c: Context) -> bool:
    return any(o.get("reduction") == "sum" for o in c.loss_calls) or bool(c.script.sum_reductions())


@premise
def log_in_code(c: Context) -> bool:
    return bool(c.script.unguarded_logs())


@premise
def std_division(c: Context) -> bool:
    """The script divides by a standard deviation, and the input shows what a std near zero makes of it: non-finite
    values (0 / 0) or values of a million and more (an input merely left unscaled is not that)."""
    if not c.script.std_divisions():
        return False
    x = c.inputs
    nonfinite = bool(x.size) and float(np.nansum(x[:, 4])) > 0
    extreme = bool(x.size) and float(np.nanmax(np.abs(x[:, :2]))) >= 1e6
    return nonfinite or extreme or (not x.size and c.has_finding(kinds.NAN_INF))


@premise
def nonfinite_input(c: Context) -> bool:
    """Non-finite values in the input's statistics, or a non-finite loss the runtime traced back to the input (on a
    step whose input was not measured)."""
    traced = any(e.kind == "trigger" and e.name == "nan_inf" and (e.data or {}).get("origin") == "input" for e in c.data.events)
    return traced or (bool(c.inputs.size) and float(np.nansum(c.inputs[:, 4])) > 0)


@premise
def pixel_range_input(c: Context) -> bool:
    """Images given as 0-255 values: non-negative input with a maximum between 2 and 256."""
    x = c.inputs
    return bool(x.size) and float(np.nanmin(x[:, 0])) >= 0 and 2.0 < float(np.nanmax(x[:, 1])) <= 256.0 and c.first_module not in ("Embedding", "EmbeddingBag")


@premise
def unscaled_input(c: Context) -> bool:
    """Real-valued input far from unit scale (std or mean above 10) that is not token ids."""
    x = c.inputs
    # (statistics of a float argument are not of token ids, whatever the first layer is; unrecorded: the first layer says)
    if not x.size or (c.input_arg is None and c.first_module in ("Embedding", "EmbeddingBag")):
        return False
    return float(np.nanmedian(x[:, 3])) > 10 or float(np.nanmedian(np.abs(x[:, 2]))) > 10


@premise
def forward_in_loop(c: Context) -> bool:
    return bool(c.script.forward_calls_in_loop(str(c.data.run.get("model") or "")))


@premise
def labels_shuffled_alone(c: Context) -> bool:
    return bool(c.script.lone_permutations() or pairing.repairs(c.script))


@premise
def module_addressable(c: Context) -> bool:
    """The target is a module of the model that code can name (its path from the model variable)."""
    m = c.target.module
    return m in c.data.index and m != "" and c.script.model_var(str(c.data.run.get("model") or "")) is not None


@premise
def module_resettable(c: Context) -> bool:
    return (c.module_type(c.target.module) or "") in RESETTABLE


@premise
def init_statement(c: Context) -> bool:
    return bool(sites.weight_edits(c, c.target.module))


def default_rms(shape: list[int]) -> float:
    """The RMS of PyTorch's default init for a weight of this shape (kaiming_uniform with a=sqrt(5): 1/sqrt(3 fan_in))."""
    return 1.0 / math.sqrt(3.0 * math.prod(shape[1:]))


def start_ratios(c: Context, module: str) -> list[tuple[float, bool]] | None:
    """Each weight matrix of ``module`` (itself and the layers inside it), and each bias beside one, at the first
    sampled step: its RMS over PyTorch's default RMS for its shape (1/sqrt(3 fan_in); an embedding's 1), and whether
    it is a bias. None when the per-parameter norms were not recorded."""
    steps, pw = c.data.metric("param_weight_norm")
    if not pw.size or not len(steps):
        return None
    first = pw[0].astype(np.float64)
    by_module: dict[int, dict[str, tuple[float, list[int]]]] = {}
    for p in c.data.params:
        mid, pid = p.get("module_id"), p.get("id")
        if mid is None or pid is None or int(pid) >= len(first) or not math.isfinite(float(first[int(pid)])):
            continue
        owner = c.data.modules[int(mid)].name
        if module and owner != module and not owner.startswith(module + "."):
            continue
        try:
            shape = [int(n) for n in json.loads(str(p.get("shape") or "[]"))]
        except (ValueError, TypeError):
            continue
        rms = float(first[int(pid)]) / math.sqrt(max(int(p.get("numel") or 0), 1))
        by_module.setdefault(int(mid), {})[str(p.get("name", "")).rpartition(".")[2]] = (rms, shape)
    out: list[tuple[float, bool]] = []
    for mid, own in by_module.items():
        weight = own.get("weight")
        if weight is None or len(weight[1]) < 2:
            continue
        embedding = c.data.modules[mid].type in ("Embedding", "EmbeddingBag")
        default = 1.0 if embedding else default_rms(weight[1])
        out.append((weight[0] / default, False))
        bias = own.get("bias")
        if bias is not None and not embedding:
            out.append((bias[0] / default, True))
    return out


@premise
def starts_off_default(c: Context, factor: float = 3.0) -> bool:
    """The target's layers did not start at PyTorch's default scale (a weight matrix more than ``factor`` x off it, a
    bias more than ``factor`` x its default size): re-initialising them with the defaults changes something.
    Unknown (no per-parameter norms) counts as off."""
    ratios = start_ratios(c, c.target.module)
    if ratios is None or not ratios:
        return True
    return any(r > factor or (r < 1.0 / factor and not bias) for r, bias in ratios)


def layers_off_scale(c: Context, factor: float = 4.0) -> int:
    """Layers whose weights start more than ``factor`` x away from PyTorch's default scale (rms 1/sqrt(3 fan_in))."""
    steps, w = c.data.metric("weight_norm")
    if not w.size:
        return 0
    n = 0
    for p in c.data.params:
        name = str(p.get("name", ""))
        if not name.endswith(".weight") or p.get("module_id") is None:
            continue
        try:
            shape = json.loads(str(p.get("shape") or "[]"))
        except ValueError:
            continue
        i = int(p["module_id"])
        if len(shape) < 2 or i >= w.shape[1] or not np.isfinite(w[0, i]) or c.data.modules[i].type in ("Embedding", "EmbeddingBag"):
            continue
        numel = sum(int(q.get("numel") or 0) for q in c.data.params if q.get("module_id") == i)
        rms = float(w[0, i]) / math.sqrt(max(numel, 1))
        default = default_rms(shape)
        if rms < default / factor or rms > default * factor:
            n += 1
    return n


@premise
def many_layers_poor(c: Context) -> bool:
    """Several layers start at the wrong scale (an init applied to the whole model), or are flagged for it."""
    bad = {f.module for f in c.findings if f.kind in (kinds.POOR_INITIALIZATION, kinds.VANISHING_GRADIENT, kinds.SATURATION)}
    return len(bad) >= 2 or layers_off_scale(c) >= max(2.0, len(c.data.own_layers()) / 3)


@premise
def negative_bias(c: Context) -> bool:
    """The layer's outputs sit mostly below zero (their mean under minus half their spread): a shift, not a scale,
    keeps the units after it dead."""
    if (c.module_type(c.target.module) or "") not in ("Linear", "Conv1d", "Conv2d", "Conv3d"):
        return False
    mean, std = c.series("act_mean", c.target.module), c.series("act_std", c.target.module)
    return bool(len(mean)) and bool(len(std)) and float(np.median(mean)) < -0.5 * float(np.median(std))


@premise
def hidden_sigmoid(c: Context) -> bool:
    return bool(sites.hidden_activations(c, {"sigmoid", "Sigmoid"}))


@premise
def hidden_tanh(c: Context) -> bool:
    return bool(sites.hidden_activations(c, {"tanh", "Tanh"}))


@premise
def dead_relu(c: Context) -> bool:
    return c.target.kind == kinds.DEAD_UNITS and bool(sites.relu_after(c, c.target.module))


@premise
def output_relu(c: Context) -> bool:
    """A ReLU on the network's output: scores (or regression values) that cannot be negative."""
    return bool(sites.output_activations(c, {"relu", "ReLU"}))


@premise
def dropout_high(c: Context) -> bool:
    return bool(sites.dropout_sites(c, 0.5))


@premise
def label_smoothing_high(c: Context) -> bool:
    """The script smooths its labels by a large amount (usual is 0.1)."""
    return bool(sites.label_smoothing_sites(c, 0.3))


@premise
def recurrent_module(c: Context) -> bool:
    return (c.module_type(c.target.module) or "") in ("LSTM", "GRU", "RNN")


@premise
def attention_in_script(c: Context) -> bool:
    return bool(c.script.attention_scores())


@premise
def attention_mask_arg(c: Context) -> bool:
    return bool(c.script.mask_arguments())


@premise
def masks_hide_keys(c: Context) -> bool:
    """An attention layer saw only a few of its keys (a mask that hides the tokens, or all but one of them):
    fewer than 30% of the keys (at most 1.5) got any attention; or the model's attention_mask itself reads inverted,
    or an attention layer's mask left it only the padding."""
    if attention.masks(c.data):
        return True
    for o in c.data.observed("attention"):
        if attention.keeps_only_padding(o.data):
            return True
        valid, keys = o.data.get("valid_keys") or [], float(o.data.get("keys") or 0)
        if valid and keys > 1 and float(np.mean(valid)) <= max(1.5, 0.3 * keys):
            return True
    return False


@premise
def random_label_writes(c: Context) -> bool:
    return bool(c.script.random_writes())


RESETTABLE = {"Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "Embedding", "EmbeddingBag",
              "LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LSTM", "GRU", "RNN", "MultiheadAttention", "RMSNorm",
              "Conv1D"}

