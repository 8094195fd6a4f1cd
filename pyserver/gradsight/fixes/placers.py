"""How each fix changes the script: a placer edits a :class:`Patch` at the script's real statements (the
optimizer's construction, the loop's backward and step, the layer's constructor) and says what the edit
does, or raises :class:`NoPlace` when this script has no place for it. Names come from the script's own
code; module paths from a store reach code only through :func:`module_ref`.
"""

from __future__ import annotations

import ast
import keyword
import math
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import pairing
from ..script import ADAPTIVE, EPOCH_SCHEDULERS, LOW_PRECISION, Script, binds, dotted, functional, kwarg, number, short
from . import sites
from .edits import Edit, NoPlace, Patch
from .evidence import Context, broadcasts, class_indices

DEFAULT_LR = {"Adam": 1e-3, "AdamW": 1e-3, "NAdam": 2e-3, "RAdam": 1e-3, "Adamax": 2e-3, "RMSprop": 1e-3, "Adagrad": 1e-2,
              "Adadelta": 1.0, "SparseAdam": 1e-3, "SGD": 1e-2}
Placer = Callable[..., str]
PLACERS: dict[str, Placer] = {}


def placer(fn: Placer) -> Placer:
    PLACERS[fn.__name__] = fn
    return fn


# -- helpers ----------------------------------------------------------------------------------------------
def is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and name.isascii()


def module_ref(model: str, module: str) -> str:
    """``model.blocks[0].attn`` for the module ``blocks.0.attn``. A part that is not a plain identifier or
    index makes the whole reference a string literal (``model.get_submodule('...')``): a store's names
    never reach generated code as code."""
    parts = module.split(".") if module else []
    if not all(p.isdigit() and p.isascii() or is_identifier(p) for p in parts):
        return f"{model}.get_submodule({module!r})"
    ref = model
    for part in parts:
        ref += f"[{part}]" if part.isdigit() else f".{part}"
    return ref


def fmt(v: float) -> str:
    """A short float literal: 0.001, 1e-05, 3.0."""
    text = f"{v:.2g}"
    return text if any(ch in text for ch in ".en") else text + ".0"


def nice(v: float) -> float:
    """One significant digit, rounded up."""
    if v <= 0 or not math.isfinite(v):
        return 1.0
    e = math.floor(math.log10(v))
    return float(math.ceil(v / 10**e) * 10**e)


def pow10(v: float) -> float:
    return float(10 ** round(math.log10(v))) if v > 0 and math.isfinite(v) else 1.0


def _root(name: str) -> str:
    return name.split(".")[0].split("[")[0]


def _bound_in(s: Script, stmt: ast.stmt, name: str) -> bool:
    """``name``'s first part is a parameter of, or assigned in, the function ``stmt`` is in (or at module level)."""
    root = _root(name)
    fn = s.function_of(stmt)
    if fn is None:
        return root in s.bound_at_module()
    a = fn.args
    params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs} | {p.arg for p in (a.vararg, a.kwarg) if p}
    return root in params or any(root in binds(b) for b in fn.body) or root in s.bound_at_module()


def before_training(c: Context, p: Patch, code: str, note: str, uses: str) -> None:
    """Insert ``code`` just before the training loop when ``uses`` is defined there, else just after the
    optimizer is built (both after the model and its optimizer exist)."""
    s = c.script
    loop = s.loop
    if loop is not None and _bound_in(s, loop, uses):
        p.insert_before(loop, code, note)
        return
    opt = s.optimizer
    if opt is not None and _bound_in(s, opt.stmt, uses):
        p.insert_after(opt.stmt, code, note)
        return
    raise NoPlace(f"no statement where {uses!r} and the optimizer exist")


def right_after_optimizer(c: Context, p: Patch, code: str, note: str, uses: str) -> None:
    """Insert ``code``, which adds parameter groups, just after the optimizer is built: a scheduler (LambdaLR,
    OneCycleLR, a get_*_schedule) or a wrapper made from the optimizer after that keeps one entry per group and
    breaks on a group added later. Before the loop only when the model is not there yet."""
    s = c.script
    o = s.optimizer
    if o is not None and _bound_in(s, o.stmt, uses):
        p.insert_after(o.stmt, code, note)
        return
    before_training(c, p, code, note, uses)


def model(c: Context) -> str:
    m = c.script.model_var(str(c.data.run.get("model") or ""))
    if not m:
        raise NoPlace("the script's model variable is not found")
    return m


def opt(c: Context) -> str:
    o = c.script.optimizer
    if o is None or not o.var:
        raise NoPlace("the script builds no optimizer gradsight recognises in a variable")
    return o.var


def step_stmt(c: Context) -> ast.stmt:
    s = c.script
    o = s.optimizer
    calls = [k for k in s.step_calls(o.var) if s.in_training(k)] if o else []
    if not calls:
        raise NoPlace("no optimizer.step() in the training loop")
    return s.stmt_of(calls[0])


def opt_at_step(c: Context) -> str:
    """The optimizer as the training step names it where it calls step(): ``self.optimizer`` in a trainer's method,
    ``optimizer`` in a plain loop (``scaler.step(optimizer)``: its argument)."""
    o = opt(c)
    s = c.script
    calls = [k for k in s.step_calls(o) if s.in_training(k)]
    if calls and isinstance(calls[0].func, ast.Attribute):
        owner = dotted(calls[0].func.value)
        held = dotted(calls[0].args[0]) if calls[0].args else owner
        return held if held and held.endswith(o) else o
    return o


def backward_stmt(c: Context) -> ast.stmt:
    b = c.script._backward_stmt()
    if b is None:
        raise NoPlace("no backward() in the training loop")
    return b


def set_arg(p: Patch, call: ast.Call, node: ast.AST | None, kw: str, text: str) -> None:
    """Set a call's argument to ``text``: replace its value, or add ``kw=text``."""
    if node is not None:
        p.replace_node(node, text)
        return
    src = p.s.segment(call)
    if not src.endswith(")"):
        raise NoPlace("the call's text could not be read")
    inner = src[:-1].rstrip()
    if inner.endswith(","):
        inner = inner[:-1]
    sep = "" if inner.endswith("(") else ", "
    p.replace_node(call, f"{inner}{sep}{kw}={text})")


def scaled(node: ast.AST, factor: float, src: str) -> str:
    v = number(node)
    if v is not None:
        return fmt(v * factor)
    return f"{src} * {fmt(factor)}"


def _scheduler_steps(c: Context) -> list[ast.stmt]:
    out = [c.script.stmt_of(k) for _, k in c.script.scheduler_step_calls()]
    if not out:
        raise NoPlace("the script does not step a scheduler")
    return out


# -- learning rate ----------------------------------------------------------------------------------------
@placer
def cap_lambda(c: Context, p: Patch) -> str:
    for s in c.script.schedulers:
        if s.ctor not in ("LambdaLR", "MultiplicativeLR") or s.ctor == "MultiplicativeLR":
            continue
        k = kwarg(s.call, "lr_lambda")
        node = k.value if k is not None else s.call.args[1] if len(s.call.args) > 1 else None
        if node is None or isinstance(node, (ast.List, ast.Tuple)):
            continue
        p.replace_node(node, f"lambda _s, _f={p.s.segment(node)}: min(1.0, _f(_s))")
        return "the schedule's multiplier is capped at 1: the rate never exceeds the rate the optimizer was built with"
    raise NoPlace("no LambdaLR with one lr_lambda")


def _bound_lr_after_scheduler(c: Context, p: Patch, bound: str, note: str, share: str = "") -> None:
    """After each scheduler step, ``bound`` (min or max) the rate against a share of its initial value."""
    o = opt(c)
    for st in _scheduler_steps(c):
        p.insert_after(st, f'for _g in {o}.param_groups:\n    _g["lr"] = {bound}(_g["lr"], {share}_g.get("initial_lr", _g["lr"]))', note)


@placer
def clamp_lr_after_scheduler(c: Context, p: Patch) -> str:
    _bound_lr_after_scheduler(c, p, "min", "keep the rate at or below its initial value")
    return "the rate stays at or below the rate the optimizer was built with"


@placer
def lr_floor_after_scheduler(c: Context, p: Patch) -> str:
    # (a third: a floor of a tenth still leaves the rate where a schedule that ended early left the run stuck)
    _bound_lr_after_scheduler(c, p, "max", "keep the rate at a third of its initial value or more", share="0.3 * ")
    return "the schedule cannot take the rate below a third of its initial value"


@placer
def delete_lr_assignments(c: Context, p: Patch) -> str:
    stmts = c.script.lr_assignments_in_loop()
    if not stmts:
        raise NoPlace("no assignment to a group's lr in the loop")
    p.delete_stmts(stmts, "the rate is set by the optimizer (and its scheduler) only")
    return "the loop no longer overwrites the learning rate"


def _lr_factor(c: Context, lower: bool) -> float:
    r = c.update_ratio
    if lower:
        f = pow10(float(np.clip(2e-3 / r, 1e-3, 0.3))) if r else 0.1
        return min(f, 0.1)
    f = pow10(float(np.clip(2e-3 / r, 3.0, 1e4))) if r else 10.0
    return max(f, 10.0)


def _scale_lr(c: Context, p: Patch, factor: float) -> str:
    nodes = c.script.lr_nodes()
    done = 0
    for call, node, kw in nodes:
        if node is None:
            if kw != "lr" or factor < 1:
                continue
            ctor = short(call.func)
            set_arg(p, call, None, "lr", fmt(DEFAULT_LR.get(ctor, 1e-3) * factor))
        else:
            p.replace_node(node, scaled(node, factor, p.s.segment(node)))
        done += 1
    if not done:
        raise NoPlace("the script sets no learning rate gradsight can change")
    lr = c.initial_lr
    return f"learning rate x{fmt(factor)}" + (f": {fmt(lr)} -> {fmt(lr * factor)}" if lr else "")


@placer
def lower_lr(c: Context, p: Patch) -> str:
    return _scale_lr(c, p, _lr_factor(c, lower=True))


@placer
def raise_lr(c: Context, p: Patch) -> str:
    return _scale_lr(c, p, _lr_factor(c, lower=False))


@placer
def default_adaptive_lr(c: Context, p: Patch) -> str:
    o = c.script.optimizer
    if o is None or o.ctor not in ADAPTIVE:
        raise NoPlace("the script's optimizer is not an adaptive one")
    want = DEFAULT_LR.get(o.ctor, 1e-3)
    done = 0
    for call, node, _kw in c.script.lr_nodes():
        if call is o.call and node is not None:
            p.replace_node(node, fmt(want))
            done += 1
    if not done:
        raise NoPlace("the optimizer's lr is not set in its constructor")
    return f"{o.ctor}'s usual learning rate {fmt(want)} (was {fmt(c.initial_lr or 0)})"


@placer
def clip_before_step(c: Context, p: Patch) -> str:
    m = model(c)
    st = step_stmt(c)
    early = c.grad_norms[: max(3, len(c.grad_norms) // 4)]
    limit = nice(max(1.0, float(np.median(early)) if len(early) else 1.0))
    call = st.value if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) else None
    code = f"torch.nn.utils.clip_grad_norm_({m}.parameters(), max_norm={fmt(limit)})"
    if call is not None and isinstance(call.func, ast.Attribute) and call.args and dotted(call.func.value) != opt(c):
        code = f"{dotted(call.func.value)}.unscale_({opt(c)})\n" + code  # a GradScaler: clip the unscaled gradients
    p.insert_before(st, code, "clip the global gradient norm")
    return f"the global gradient norm is clipped to {fmt(limit)} (its typical value early in the run)"


@placer
def warmup(c: Context, p: Patch) -> str:
    o = c.script.optimizer
    if o is None or not o.var:
        raise NoPlace("no optimizer variable")
    n = max(10, min(200, c.data.n_steps // 10))
    st = step_stmt(c)
    p.insert_after(o.stmt, f"_warmup = torch.optim.lr_scheduler.LambdaLR({o.var}, lambda s: min(1.0, (s + 1) / {n}))", "linear warmup")
    p.insert_after(st, "_warmup.step()", "linear warmup")
    return f"the rate rises linearly to its value over the first {n} steps"


@placer
def scheduler_step_per_epoch(c: Context, p: Patch) -> str:
    pairs = c.script.epoch_scheduler_steps_per_batch()
    inner = c.script.inner_loop
    if not pairs or inner is None:
        raise NoPlace("no epoch scheduler stepped per batch")
    for sched, call in pairs:
        st = c.script.stmt_of(call)
        p.delete_stmt(st, "stepped once an epoch, after the loop over batches")
        p.insert_after(inner, f"{sched.var}.step()", "once an epoch")
    return f"{pairs[0][0].ctor} steps once an epoch, as its step_size / milestones mean"


@placer
def step_scheduler(c: Context, p: Patch) -> str:
    found = c.script.unstepped_schedulers()
    if not found:
        raise NoPlace("every scheduler is stepped")
    sched = found[0]
    if sched.ctor == "ReduceLROnPlateau":
        raise NoPlace("ReduceLROnPlateau steps on a metric the script must choose")
    s = c.script
    inner, outer = s.inner_loop, s.loop
    if sched.ctor in EPOCH_SCHEDULERS and inner is not None and outer is not None and inner is not outer:
        p.insert_after(inner, f"{sched.var}.step()", "once an epoch")
        return f"{sched.ctor} steps once an epoch"
    st = step_stmt(c)
    block = s.block_of(st) or []
    at = block.index(st) if st in block else -1
    after = st
    nxt = block[at + 1] if 0 <= at < len(block) - 1 else None
    if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Call) and short(nxt.value.func) == "update":
        after = nxt  # (a GradScaler's update belongs with its step)
    p.insert_after(after, f"{sched.var}.step()", "after each optimizer step")
    return f"{sched.ctor} steps after each optimizer step: the rate follows its schedule"


@placer
def stretch_schedule(c: Context, p: Patch) -> str:
    found = c.script.schedule_horizons()
    if not found:
        raise NoPlace("no schedule length in the script")
    n = int(c.data.n_steps)
    sch, _, node, name = found[0]
    p.replace_node(node, str(n))
    return f"{sch.ctor}'s {name} is the run's {n} optimizer steps: the schedule ends where the run does"


@placer
def optimizer_over_trained_model(c: Context, p: Patch) -> str:
    from .evidence import _other_models

    o = c.script.optimizer
    others = _other_models(c)
    if o is None or not o.models or not others:
        raise NoPlace("no other model trained in the loop")
    held = [k.func.value for k in ast.walk(o.call) if isinstance(k, ast.Call) and isinstance(k.func, ast.Attribute)
            and k.func.attr in ("parameters", "named_parameters") and dotted(k.func.value) in o.models]
    if not held:
        raise NoPlace("the optimizer's parameters are not X.parameters()")
    for node in held:
        p.replace_node(node, others[0])
    return f"the optimizer steps {others[0]}'s parameters, the model the loss trains"


@placer
def scheduler_step_after_optimizer_step(c: Context, p: Patch) -> str:
    pairs = c.script.scheduler_steps_per_micro_batch()
    if not pairs:
        raise NoPlace("no scheduler stepped per micro-batch")
    st = step_stmt(c)
    for sched, call in pairs:
        p.delete_stmt(c.script.stmt_of(call), "stepped once per optimizer step, after it")
        p.insert_after(st, f"{dotted(call.func.value) if isinstance(call.func, ast.Attribute) else sched.var}.step()",
                       "once per optimizer step")
    return f"{pairs[0][0].ctor} advances once per optimizer step, as its horizon counts them"


# -- optimizer settings -----------------------------------------------------------------------------------
def _negative(node: ast.AST) -> bool:
    return isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)


def _set_hyper(c: Context, p: Patch, name: str, text: str, only_negative: bool = False) -> None:
    o = c.script.optimizer
    if o is None:
        raise NoPlace("no optimizer")
    done = False
    for d in [d for a in o.call.args for d in ast.walk(a) if isinstance(d, ast.Dict)]:
        for key, value in zip(d.keys, d.values):
            if isinstance(key, ast.Constant) and key.value == name and (not only_negative or _negative(value)):
                p.replace_node(value, text)
                done = True
    k = kwarg(o.call, name)
    if only_negative and (k is None or not _negative(k.value)):
        if not done:
            raise NoPlace(f"no negative {name} written in the optimizer's constructor")
        return
    if k is not None or not done:
        set_arg(p, o.call, k.value if k is not None else None, name, text)


@placer
def set_optimizer_arg(c: Context, p: Patch, name: str, value: str, adamw: str = "", only_negative: bool = False) -> str:
    text = adamw if adamw and c.optimizer_type == "AdamW" else value
    _set_hyper(c, p, name, text, only_negative)
    was = c.hyper(name)
    return f"{name} = {text}" + (f" (was {fmt(was)})" if was is not None else "")


@placer
def set_group_arg_before_loop(c: Context, p: Patch, name: str, value: str, adamw: str = "") -> str:
    o = opt(c)
    text = adamw if adamw and c.optimizer_type == "AdamW" else value
    before_training(c, p, f'for _g in {o}.param_groups:\n    _g["{name}"] = {text}', f"{name} = {text} in every group", o)
    return f"every parameter group's {name} is {text}"


@placer
def scale_l2_penalty(c: Context, p: Patch) -> str:
    terms = c.script.l2_penalty_terms()
    if not terms:
        raise NoPlace("no explicit weight penalty in the loop")
    for t in terms:
        p.replace_node(t, scaled(t, 0.01, p.s.segment(t)))
    return "the explicit weight penalty is 100x smaller"


@placer
def loosen_clip(c: Context, p: Patch) -> str:
    calls = c.script.calls_named("clip_grad_norm_", "clip_grad_norm")
    norms = c.grad_norms
    limit = nice(max(1.0, float(np.median(norms)) * 2 if len(norms) else 1.0))
    for k in calls:
        kw = kwarg(k, "max_norm")
        node = kw.value if kw is not None else k.args[1] if len(k.args) > 1 else None
        if node is None:
            continue
        p.replace_node(node, fmt(limit))
    if not p.pending():
        raise NoPlace("no clip_grad_norm_ with a max_norm")
    return f"max_norm = {fmt(limit)}: only unusual steps are clipped"


@placer
def loosen_clip_value(c: Context, p: Patch) -> str:
    gmax = c.column("grad_max")
    limit = nice(max(1.0, float(np.median(gmax)) * 2 if len(gmax) else 1.0))
    for k in c.script.calls_named("clip_grad_value_"):
        kw = kwarg(k, "clip_value")
        node = kw.value if kw is not None else k.args[1] if len(k.args) > 1 else None
        if node is not None:
            p.replace_node(node, fmt(limit))
    if not p.pending():
        raise NoPlace("no clip_grad_value_ with a value")
    return f"clip_value = {fmt(limit)}: only unusual gradients are cut"


@placer
def delete_clipping(c: Context, p: Patch) -> str:
    calls = c.script.calls_named("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")
    stmts = [c.script.stmt_of(k) for k in calls if isinstance(c.script.stmt_of(k), ast.Expr)]
    if not stmts:
        raise NoPlace("no clipping statement")
    p.delete_stmts(stmts, "no clipping")
    return "gradients are no longer clipped"


# -- the loop ---------------------------------------------------------------------------------------------
@placer
def zero_grad_after_step(c: Context, p: Patch) -> str:
    o = opt_at_step(c)
    st = step_stmt(c)
    for k in c.script.zero_grad_calls_in_loop():
        z = c.script.stmt_of(k)
        if isinstance(z, ast.Expr):
            p.delete_stmt(z, "zeroed after each optimizer step instead")
    after = st
    block = c.script.block_of(st) or []
    at = block.index(st) if st in block else -1
    if 0 <= at < len(block) - 1:  # a GradScaler's update() belongs with its step
        nxt = block[at + 1]
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Call) and short(nxt.value.func) == "update":
            after = nxt
    p.insert_after(after, f"{o}.zero_grad()", "start each step's gradients from zero")
    return "each step's gradients start from zero and are used by that step"


@placer
def move_step_after_backward(c: Context, p: Patch) -> str:
    st = c.script.step_before_backward()
    if st is None:
        raise NoPlace("step() does not come before backward()")
    b = backward_stmt(c)
    block = c.script.block_of(b) or []
    after = b
    for nxt in block[block.index(b) + 1:]:
        text = p.s.segment(nxt)
        if "clip_grad" in text or "unscale_" in text:
            after = nxt
        else:
            break
    p.delete_stmt(st, "moved after backward()")
    p.insert_after(after, p.s.segment(st), "step with this batch's gradients")
    return "the optimizer steps with the gradients backward() just computed"


@placer
def call_step(c: Context, p: Patch) -> str:
    o = opt(c)
    if c.script.step_calls(o):
        raise NoPlace("the script already steps its optimizer")
    p.insert_after(backward_stmt(c), f"{o}.step()\n{o}.zero_grad()", "update the weights")
    return "the optimizer updates the weights after each backward()"


@placer
def divide_accumulated_loss(c: Context, p: Patch) -> str:
    nb = c.column("n_backward")
    n = int(round(float(np.median(nb)))) if len(nb) else 0
    if n < 2:
        raise NoPlace("one backward per step")
    b = [k for k in c.script.backward_calls if c.script.in_training(k)]
    if not b or not isinstance(b[0].func, ast.Attribute):
        raise NoPlace("no backward() in the loop")
    recv = b[0].func.value
    p.replace_node(recv, f"({p.s.segment(recv)} / {n})")
    return f"each of the {n} accumulated backward() passes adds 1/{n} of its gradient"


# -- the graph and the parameters -------------------------------------------------------------------------
@placer
def unwrap_detach(c: Context, p: Patch) -> str:
    calls = c.script.detach_calls()
    if not calls:
        raise NoPlace("no detach() in the forward")
    for k in calls:
        assert isinstance(k.func, ast.Attribute)
        st = c.script.stmt_of(k)
        if isinstance(st, ast.Assign) and st.value is k and [dotted(t) for t in st.targets] == [dotted(k.func.value)]:
            p.delete_stmt(st, "the graph is no longer cut here")  # x = x.detach()
        else:
            p.replace_node(k, p.s.segment(k.func.value))
    return "the gradient flows through the forward again"


@placer
def unwrap_no_grad(c: Context, p: Patch) -> str:
    blocks = c.script.no_grad_blocks()
    decorators = c.script.no_grad_decorators()
    if not blocks and not decorators:
        raise NoPlace("no no_grad block in the forward")
    for w in blocks:
        first, last = w.body[0].lineno, w.body[-1].end_lineno or w.body[-1].lineno
        body = textwrap.dedent("\n".join(p.s.lines[first - 1: last]))
        p.replace_stmt(w, body, "the forward runs with autograd on")
    for d in decorators:
        line = p.s.lines[d.lineno - 1]
        pad = line[: len(line) - len(line.lstrip())]
        was = " ".join(p.s.segment(d).split())
        p.edits.append(Edit(p.file, d.lineno, (d.end_lineno or d.lineno) + 1,
                            f"{pad}# gradsight fix '{p.tag}': the method runs with autograd on (removed: @{was})\n"))
    return "the layers in the block get gradients again"


def _missing_params_code(o: str, m: str) -> str:
    return (f'_held = {{id(q) for g in {o}.param_groups for q in g["params"]}}\n'
            f"_missing = [q for q in {m}.parameters() if q.requires_grad and id(q) not in _held]\n"
            # the new group copies the first one's settings (a scheduler's initial_lr / max_lr included)
            f'if _missing:\n    {o}.add_param_group({{**{{k: v for k, v in {o}.param_groups[0].items() if k != "params"}}, "params": _missing}})')


@placer
def register_missing_params(c: Context, p: Patch) -> str:
    o, m = opt(c), model(c)
    missing = c.params(trainable=1, in_optimizer=0)
    right_after_optimizer(c, p, _missing_params_code(o, m), "give the optimizer the parameters it does not hold", m)
    return f"the optimizer updates the {len(missing)} parameter tensors it did not hold"


@placer
def register_container(c: Context, p: Patch) -> str:
    found = sites.plain_containers(c)
    if not found:
        raise NoPlace("no plain list or dict of layers assigned in the model's class")
    nn = c.script.torch_nn()  # (from the script's imports: a LightningModule's base says nothing of it)
    if nn is None:
        raise NoPlace("the script does not import torch.nn")
    for value, use in found:
        p.replace_node(value, f"{nn}.{use}({p.s.segment(value)})")
    uses = sorted({use for _, use in found})
    return f"the layers are registered ({', '.join(uses)}): in parameters(), stepped by the optimizer, saved in state_dict"


@placer
def delete_freeze(c: Context, p: Patch) -> str:
    stmts = c.script.freeze_statements()
    if not stmts:
        raise NoPlace("no statement sets requires_grad to False")
    p.delete_stmts(stmts, "the parameters stay trainable")
    return "the frozen parameters train again"


@placer
def unfreeze_before_loop(c: Context, p: Patch) -> str:
    o, m = opt(c), model(c)
    code = f"for _q in {m}.parameters():\n    _q.requires_grad_(True)\n" + _missing_params_code(o, m)
    before_training(c, p, code, "train every parameter", m)
    return "every parameter is trainable and held by the optimizer"


@placer
def train_mode_in_loop(c: Context, p: Patch) -> str:
    m = model(c)
    inner = c.script.inner_loop
    if inner is None or not _bound_in(c.script, inner, m):
        raise NoPlace("no loop over batches where the model is defined")
    p.insert_at_body_start(inner, f"{m}.train()", "train mode for every training step")
    return "BatchNorm and Dropout run in training mode during training"


@placer
def remove_low_precision_cast(c: Context, p: Patch) -> str:
    casts = c.script.model_casts()
    if not casts:
        raise NoPlace("the model is not cast to a low precision")
    for k in casts:
        assert isinstance(k.func, ast.Attribute)
        recv = p.s.segment(k.func.value)
        if k.func.attr in ("bfloat16", "half"):
            p.replace_node(k, recv)
            continue
        rest = [p.s.segment(a) for a in k.args if short(a) not in LOW_PRECISION]
        rest += [f"{kw.arg}={p.s.segment(kw.value)}" for kw in k.keywords if kw.arg != "dtype"]
        p.replace_node(k, f"{recv}.to({', '.join(rest)})" if rest else recv)
    return "the weights stay in float32 (autocast still runs the matmuls in low precision), so small updates are not rounded away"


# -- the loss and its targets -----------------------------------------------------------------------------
def _nn_prefix(call: ast.Call) -> str:
    name = dotted(call.func)
    return name.rpartition(".")[0] + "." if "." in name else ""


@placer
def remove_output_activation(c: Context, p: Patch, names: list[str]) -> str:
    found = sites.output_activations(c, set(names))
    if not found:
        raise NoPlace("no such activation on the output")
    for k in found:
        name = short(k.func)
        if name[:1].isupper():
            prefix = _nn_prefix(k)
            p.replace_node(k, f"{prefix}Identity()" if prefix else "torch.nn.Identity()")
        elif isinstance(k.func, ast.Attribute) and not k.args or (isinstance(k.func, ast.Attribute) and dotted(k.func.value) not in (
                "F", "torch", "nn.functional", "torch.nn.functional", "functional") and not dotted(k.func.value).endswith("functional")):
            p.replace_node(k, p.s.segment(k.func.value))  # x.softmax(-1)
        elif k.args:
            p.replace_node(k, p.s.segment(k.args[0]))
    return "the loss gets the raw scores it expects"


@placer
def log_softmax_for_nll(c: Context, p: Patch) -> str:
    found = sites.output_activations(c, {"softmax", "Softmax"})
    if not found:
        raise NoPlace("no softmax on the output")
    for k in found:
        src = p.s.segment(k)
        name = short(k.func)
        p.replace_node(k, src.replace("Softmax(", "LogSoftmax(", 1) if name == "Softmax" else src.replace("softmax(", "log_softmax(", 1))
    return "nll_loss gets log-probabilities"


@placer
def softmax_over_classes(c: Context, p: Patch) -> str:
    dims = c.script.softmax_over_batch()
    if not dims:
        raise NoPlace("no softmax over dim 0")
    nll = {id(a) for k in c.script.loss_calls() if c.script.loss_name(k) in ("nll_loss", "NLLLoss") and k.args
           for a in ast.walk(k.args[0])}
    for d in dims:
        # straight into nll_loss the classes are dim 1 (an image's pixels too); elsewhere the last dim
        p.replace_node(d, "1" if id(d) in nll else "-1")
    return "each row's scores are normalised over its own classes"


def _loss_calls(c: Context, names: set[str], observed: set[str] | None = None) -> list[ast.Call]:
    """The script's loss calls of these losses (with a prediction and a target); with ``observed``, only those of the
    losses whose observed calls show the fault (functional names: a statement adding two losses edits the faulty one)."""
    out = [k for k in c.script.loss_calls() if c.script.loss_name(k) in names and len(k.args) >= 2
           and (observed is None or functional(c.script.loss_name(k)) in observed)]
    if not out:
        raise NoPlace("no such loss call with a prediction and a target")
    return out


@placer
def cross_entropy_for_indices(c: Context, p: Patch) -> str:
    from ..script import REGRESSION_LOSSES

    for k in _loss_calls(c, REGRESSION_LOSSES, {str(o.get("loss")) for o in c.loss_calls if class_indices(o)}):
        pred, target = p.s.segment(k.args[0]), p.s.segment(k.args[1])
        p.replace_node(k, f"torch.nn.functional.cross_entropy({pred}, {target}.long())")
    return "the class indices are scored by cross-entropy over the output's classes"


@placer
def binary_targets_to_unit(c: Context, p: Patch) -> str:
    from ..script import BINARY_LOSSES

    lo = min((float(o.get("target_min", 0)) for o in c.loss_calls), default=0.0)
    hi = max((float(o.get("target_max", 1)) for o in c.loss_calls), default=1.0)
    for k in _loss_calls(c, BINARY_LOSSES):
        t = p.s.segment(k.args[1])
        p.replace_node(k.args[1], f"({t} > 0).float()" if lo < 0 else f"({t} / {fmt(hi)})")
    return "the binary loss gets targets in [0, 1]"


@placer
def view_as_target(c: Context, p: Patch) -> str:
    broadcast = {str(o.get("loss")) for o in c.loss_calls if broadcasts(o)}
    for k in c.script.loss_calls():
        if len(k.args) >= 2 and (not broadcast or functional(c.script.loss_name(k)) in broadcast):
            p.replace_node(k.args[0], f"{p.s.segment(k.args[0])}.view_as({p.s.segment(k.args[1])})")
    if not p.pending():
        raise NoPlace("no loss call with a prediction and a target")
    return "prediction and target have the same shape: no broadcast to [B, B]"


@placer
def mean_reduction(c: Context, p: Patch) -> str:
    nodes = c.script.sum_reductions()
    if not nodes:
        raise NoPlace("no reduction='sum' in the script")
    for n in nodes:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):  # (...).sum() of per-element terms
            inner = p.s.segment(n.func.value)
            simple = isinstance(n.func.value, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
            p.replace_node(n, f"{inner}.mean()" if simple else f"({inner}).mean()")
        else:
            p.replace_node(n, '"mean"')
    return "the loss is averaged over the batch: the step size no longer grows with the batch"


@placer
def clamp_log(c: Context, p: Patch) -> str:
    calls = c.script.unguarded_logs()
    if not calls:
        raise NoPlace("no unguarded log")
    for k in calls:
        if k.args:
            p.replace_node(k.args[0], f"({p.s.segment(k.args[0])}).clamp_min(1e-8)")
        elif isinstance(k.func, ast.Attribute):
            p.replace_node(k.func.value, f"({p.s.segment(k.func.value)}).clamp_min(1e-8)")
    return "log never sees 0: no -inf / NaN"


@placer
def eps_in_division(c: Context, p: Patch) -> str:
    divs = c.script.std_divisions()
    if not divs:
        raise NoPlace("no division by a std")
    for d in divs:
        p.replace_node(d.right, f"({p.s.segment(d.right)} + 1e-6)")
    return "a zero standard deviation no longer divides by zero"


# -- the input --------------------------------------------------------------------------------------------
def _forward_inputs(c: Context, elsewhere: bool = False) -> list[ast.AST]:
    """The model's input in its calls in the training loop (with ``elsewhere``, in its other calls too: an
    evaluation's): the argument the run's input statistics are of (a recommender's dense features after its
    ids), else the first."""
    calls = c.script.forward_calls_in_loop(str(c.data.run.get("model") or ""))
    if elsewhere and calls:
        calls += c.script.forward_calls_elsewhere(str(c.data.run.get("model") or ""))
    at = c.input_arg
    out: list[ast.AST] = []
    for k in calls:
        kw = kwarg(k, at) if isinstance(at, str) else None
        if kw is not None:
            out.append(kw.value)
        elif isinstance(at, int) and at < len(k.args) and not any(isinstance(a, ast.Starred) for a in k.args[: at + 1]):
            out.append(k.args[at])
        elif at is None and k.args:
            out.append(k.args[0])
    if not out:
        raise NoPlace("no model(x) call in the training loop")
    return out


def _preparing_function(c: Context, a: ast.AST) -> ast.FunctionDef | None:
    """The script's own function that prepares the model's input, ``model(preprocess(x))``: what it returns is what
    the model gets, in the training loop and wherever else it is called (an evaluation)."""
    if not (isinstance(a, ast.Call) and isinstance(a.func, ast.Name)):
        return None
    defs = [n for n in c.script.tree.body if isinstance(n, ast.FunctionDef) and n.name == a.func.id]
    if len(defs) != 1:
        return None
    returns = [r for r in ast.walk(defs[0]) if isinstance(r, ast.Return)]
    return defs[0] if returns and all(r.value is not None for r in returns) else None


def _transformed(how: str, node: ast.AST, x: str) -> str:
    if how == "nan_to_num":
        return f"torch.nan_to_num({x})"
    if how == "pixels":
        return f"({x} / 255.0)"
    if how == "standardize":
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
            return f"(({x} - {x}.mean(0, keepdim=True)) / ({x}.std(0, keepdim=True) + 1e-6))"
        # an expression (a call that prepares the batch) is evaluated once, as before
        return f"(lambda _x: (_x - _x.mean(0, keepdim=True)) / (_x.std(0, keepdim=True) + 1e-6))({x})"
    raise NoPlace(f"unknown input transform {how!r}")


def _batch_assignment(c: Context, a: ast.AST) -> ast.AST | None:
    """What a plain name given to the model was assigned from, when that is one statement of the training loop
    (``x = data[idx]``)."""
    if not isinstance(a, ast.Name):
        return None
    made = [st for st in c.script.assignments_to(a.id) if isinstance(st, ast.Assign) and c.script.in_training(st)]
    if len(made) != 1 or len(made[0].targets) != 1 or not isinstance(made[0].targets[0], ast.Name):
        return None
    return made[0].value


@placer
def transform_input(c: Context, p: Patch, how: str) -> str:
    done: set[int] = set()
    # non-finite values are made finite wherever the model is called (an evaluation's data holds them too, and
    # nan_to_num changes nothing where there are none); a scale is changed only where the model trains
    for a in _forward_inputs(c, elsewhere=how == "nan_to_num"):
        fn = _preparing_function(c, a)
        made = _batch_assignment(c, a) if how == "nan_to_num" else None
        if made is not None:
            # the batch made finite where it is taken from the data: a loss that compares with it (a reconstruction)
            # gets finite values too
            if id(made) not in done:
                done.add(id(made))
                p.replace_node(made, _transformed(how, made, p.s.segment(made)))
        elif fn is None:
            p.replace_node(a, _transformed(how, a, p.s.segment(a)))
        elif id(fn) not in done:
            # transformed where it is prepared, so that every call of the model gets the same input (an evaluation too)
            done.add(id(fn))
            for v in [r.value for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]:
                p.replace_node(v, _transformed(how, v, p.s.segment(v)))
    return {"nan_to_num": "non-finite input values become finite", "pixels": "pixels in [0, 1]",
            "standardize": "each input feature has mean 0 and std 1"}.get(how, how)


@placer
def delete_random_writes(c: Context, p: Patch) -> str:
    stmts = c.script.random_writes()
    if not stmts:
        raise NoPlace("nothing writes random values into the data")
    p.delete_stmts(stmts, "the data keeps its values")
    return "the data keeps its own values"


@placer
def delete_lone_permutation(c: Context, p: Patch) -> str:
    stmts = c.script.lone_permutations()
    lone = {id(st) for st in stmts}
    repairs = [r for r in pairing.repairs(c.script) if id(r.stmt) not in lone]
    if not stmts and not repairs:
        raise NoPlace("nothing takes the labels apart from their inputs")
    stmts += [r.stmt for r in repairs if r.delete]
    if stmts:
        p.delete_stmts(stmts, "inputs and labels keep their pairing")
    for r in repairs:
        if r.hoist:
            p.insert_before(r.stmt, r.hoist, r.note)
        for node, text in r.rewrites:
            p.replace_node(node, text)
    return "each input keeps its own label"


# -- weights ----------------------------------------------------------------------------------------------
def _ref(c: Context) -> tuple[str, str]:
    mod = c.target.module
    if not mod or mod not in c.data.index:
        raise NoPlace("the target is not a module of the model")
    parts = [str(p.get("name") or "") for p in c.data.run.get("models") or [] if isinstance(p, dict)]
    if len(parts) >= 2:  # a store of several models names a module "<model>.<name>": that model's variable holds it
        for name in parts:
            if is_identifier(name) and mod.startswith(f"{name}."):
                return name, module_ref(name, mod[len(name) + 1:])
        raise NoPlace("the module belongs to one of several models, and which variable holds it is not known")
    m = model(c)
    return m, module_ref(m, mod)


def _reset_code(ref: str, skip_root: bool = False) -> str:
    """Call every submodule's own reset (``reset_parameters``, MultiheadAttention's ``_reset_parameters``)."""
    cond = f" and _m is not {ref}" if skip_root else ""
    return (f"with torch.no_grad():\n    for _m in {ref}.modules():\n"
            f'        _reset = getattr(_m, "reset_parameters", None) or getattr(_m, "_reset_parameters", None)\n'
            f"        if callable(_reset){cond}:\n            _reset()")


@placer
def reset_module(c: Context, p: Patch) -> str:
    m, ref = _ref(c)
    before_training(c, p, _reset_code(ref), f"PyTorch's default initialisation for {c.target.module}", m)
    return f"{c.target.module} starts from PyTorch's default initialisation"


@placer
def reset_all(c: Context, p: Patch) -> str:
    m = model(c)
    before_training(c, p, _reset_code(m, skip_root=True), "PyTorch's default initialisation for every layer", m)
    return "every layer starts from PyTorch's default initialisation"


@placer
def delete_weight_edits(c: Context, p: Patch) -> str:
    stmts = sites.weight_edits(c, c.target.module)
    if not stmts:
        raise NoPlace("no statement edits the module's weights")
    p.delete_stmts(stmts, "keep the layer's default initialisation")
    return "the layer keeps its default initialisation"


@placer
def zero_bias(c: Context, p: Patch) -> str:
    m, ref = _ref(c)
    if not c.params(name=c.target.module + ".bias"):  # type: ignore[arg-type]
        names = {q.get("name") for q in c.data.params}
        if c.target.module + ".bias" not in names:
            raise NoPlace("the layer has no bias")
    before_training(c, p, f"with torch.no_grad():\n    {ref}.bias.zero_()", "a zero bias lets the units fire again", m)
    return "the units start with a zero bias, so ReLU passes half of them"


@placer
def kaiming_init(c: Context, p: Patch) -> str:
    m, ref = _ref(c)
    if (c.module_type(c.target.module) or "") not in ("Linear", "Conv1d", "Conv2d", "Conv3d"):
        raise NoPlace("not a linear or convolution layer")
    before_training(c, p, f'torch.nn.init.kaiming_normal_({ref}.weight, nonlinearity="relu")', "He initialisation for a ReLU layer", m)
    return "the layer's weights have the variance a ReLU network needs"


@placer
def orthogonal_recurrent(c: Context, p: Patch) -> str:
    m, ref = _ref(c)
    if (c.module_type(c.target.module) or "") not in ("LSTM", "GRU", "RNN"):
        raise NoPlace("not a recurrent layer")
    before_training(c, p, f'for _n, _w in {ref}.named_parameters():\n    if "weight_hh" in _n:\n        torch.nn.init.orthogonal_(_w)',
                    "orthogonal recurrent weights", m)
    return "the recurrent weights keep the gradient's norm through time"


# -- activations and dropout ------------------------------------------------------------------------------
FUNCTIONAL = {"relu": ("ReLU", "relu"), "leaky_relu": ("LeakyReLU", "leaky_relu"), "gelu": ("GELU", "gelu")}


def _swap_activation(p: Patch, k: ast.Call, new: str) -> None:
    module, fn = FUNCTIONAL[new]
    name = short(k.func)
    extra = ", 0.01" if new == "leaky_relu" else ""
    if name[:1].isupper():
        prefix = _nn_prefix(k)
        p.replace_node(k, f"{prefix}{module}({'0.01' if new == 'leaky_relu' else ''})" if prefix else f"torch.nn.{module}()")
        return
    owner = dotted(k.func.value) if isinstance(k.func, ast.Attribute) else ""
    if isinstance(k.func, ast.Attribute) and not k.args:  # x.sigmoid()
        p.replace_node(k, f"torch.nn.functional.{fn}({p.s.segment(k.func.value)}{extra})")
    elif owner in ("F", "functional") or owner.endswith("functional"):
        p.replace_node(k, f"{owner}.{fn}({', '.join(p.s.segment(a) for a in k.args[:1])}{extra})")
    elif k.args:
        p.replace_node(k, f"torch.nn.functional.{fn}({p.s.segment(k.args[0])}{extra})")


@placer
def replace_hidden_activation(c: Context, p: Patch, names: list[str], new: str) -> str:
    found = sites.hidden_activations(c, set(names))
    if not found:
        raise NoPlace("no such activation inside the network")
    for k in found:
        _swap_activation(p, k, new)
    return f"the hidden layers use {FUNCTIONAL[new][0]}, which does not saturate"


@placer
def leaky_relu(c: Context, p: Patch) -> str:
    found = sites.relu_after(c, c.target.module)
    if not found:
        raise NoPlace("no ReLU after the layer")
    for k in found:
        _swap_activation(p, k, "leaky_relu")
    return "a unit with negative input still passes a small gradient"


def _set_numbers(p: Patch, found: list[ast.AST], to: float, what: str) -> None:
    """Write ``to`` in place of each literal rate found (``what`` says which, when there is none)."""
    if not found:
        raise NoPlace(f"no {what}")
    for n in found:
        p.replace_node(n, fmt(to))


@placer
def lower_dropout(c: Context, p: Patch, to: float = 0.1) -> str:
    _set_numbers(p, sites.dropout_sites(c, 0.5), to, "dropout rate of 0.5 or more")
    return f"dropout keeps {round((1 - to) * 100)}% of the units"


@placer
def lower_label_smoothing(c: Context, p: Patch, to: float = 0.1) -> str:
    _set_numbers(p, sites.label_smoothing_sites(c, 0.3), to, "label smoothing of 0.3 or more")
    return f"the true class keeps {round((1 - to) * 100)}% of the target's mass"


# -- attention --------------------------------------------------------------------------------------------
def _proper_scale(text: str, op: ast.operator) -> bool:
    """A factor that already scales the scores down by sqrt(d): ``* d ** -0.5``, ``* self.scale``, ``/ math.sqrt(d)``."""
    t = text.replace(" ", "")
    if isinstance(op, ast.Div):
        return any(w in t for w in ("sqrt", "**0.5", "scale"))
    return any(w in t for w in ("**-0.5", "rsqrt", "1/", "1.0/", "scale"))


@placer
def scale_attention(c: Context, p: Patch) -> str:
    done = 0
    for expr, mm in c.script.attention_scores():
        q = mm.left if isinstance(mm, ast.BinOp) else mm.args[0] if isinstance(mm, ast.Call) and mm.args else None
        if q is None or not isinstance(q, (ast.Name, ast.Attribute, ast.Subscript)):
            continue
        qs = p.s.segment(q)
        if expr is mm:
            p.replace_node(mm, f"({p.s.segment(mm)}) * {qs}.size(-1) ** -0.5")
        else:
            assert isinstance(expr, ast.BinOp)
            other = expr.right if expr.left is mm else expr.left
            if _proper_scale(p.s.segment(other), expr.op):
                continue
            p.replace_node(other, f"{qs}.size(-1) ** {'-0.5' if isinstance(expr.op, ast.Mult) else '0.5'}")
        done += 1
    if not done:
        raise NoPlace("no attention score without the 1/sqrt(d) scale")
    return "attention scores are scaled by 1/sqrt(d): the softmax is no longer saturated"


@placer
def invert_mask(c: Context, p: Patch) -> str:
    masks = c.script.mask_arguments()
    if not masks:
        raise NoPlace("no attention mask argument")
    for m in masks[:1]:
        p.replace_node(m, f"torch.logical_not({p.s.segment(m)})")
    return "the mask hides the padding, not the tokens"


def run(name: str, c: Context, p: Patch, params: dict[str, Any]) -> str:
    fn = PLACERS.get(name)
    if fn is None:
        raise NoPlace(f"unknown placer {name!r}")
    return fn(c, p, **params)


@placer
def eval_to_train(c: Context, p: Patch) -> str:
    m = model(c)
    calls = [k for k in c.script.eval_calls() if isinstance(k.func, ast.Attribute) and dotted(k.func.value) == m
             and not any(w in getattr(c.script.function_of(k), "name", "") for w in ("eval", "valid", "test", "predict"))
             and not c.script.in_training(k)]
    if not calls:
        raise NoPlace("no model.eval() before training")
    for k in calls:
        assert isinstance(k.func, ast.Attribute)
        p.replace_node(k, f"{p.s.segment(k.func.value)}.train()")
    return "the model trains in training mode"


@placer
def bce_with_logits(c: Context, p: Patch) -> str:
    found = sites.output_activations(c, {"sigmoid", "Sigmoid"})
    losses = [k for k in c.script.loss_calls() if c.script.loss_name(k) in ("BCELoss", "binary_cross_entropy")]
    if not found or not losses:
        raise NoPlace("no sigmoid feeding binary_cross_entropy")
    remove_output_activation(c, p, ["sigmoid", "Sigmoid"])
    for k in losses:
        ctor = c.script.criterion_ctor(k)
        if ctor is not None:
            p.replace_node(ctor.func, p.s.segment(ctor.func).replace("BCELoss", "BCEWithLogitsLoss"))
        else:
            p.replace_node(k.func, p.s.segment(k.func).replace("binary_cross_entropy", "binary_cross_entropy_with_logits"))
    return "the sigmoid and the log are computed together, stably"


@placer
def rebuild_optimizer_after_model(c: Context, p: Patch) -> str:
    o = c.script.optimizer
    st = c.script.model_reassigned_after_optimizer()
    if o is None or st is None or c.script.block_of(st) is not c.script.block_of(o.stmt):
        raise NoPlace("the model is not rebuilt after its optimizer in the same block")
    # what is built on the optimizer between it and the rebuild (a scheduler) moves with it
    block = c.script.block_of(o.stmt) or []
    i, j = block.index(o.stmt), block.index(st)
    moved = [o.stmt] + [b for b in block[i + 1:j] if o.var and any(isinstance(x, ast.Name) and x.id == o.var.split(".")[0]
                                                                 for x in ast.walk(b))]
    p.delete_stmts(moved, "built after the model is final")
    p.insert_after(st, "\n".join(p.s.segment(b) for b in moved), "the optimizer holds the final model's parameters")
    return "the optimizer is built from the model that trains"
