"""Mutation operators of the fault zoo: each turns a healthy base program into a faulty (or bait) one.

A base program marks the places an operator may edit with trailing comments,
``# zoo: TAG key=value ...`` (several on one line are separated by `` | ``). The markers are
removed from every generated script, so what runs (and what gradsight sees) is plain user
code. An operator returns ``None`` where it does not apply, else one :class:`Variant` per site:
the mutated source and the answers a PyTorch expert would accept for it, as ``{module, kind}``
pairs. Module names are ``named_modules()`` names of the root model (the module whose
parameters the optimizer steps), or the places ``loss``, ``optimizer``, ``input``; the
manifest checks each against the root model's names recorded while the mutant ran.

Nothing here imports gradsight: the expected answers come from the construction, never from
how gradsight decides.

Markers used (all optional; an operator needing one that a base lacks does not apply):

=============  =====================================================================================
``model``      the statement that builds the root model (``var=`` its name; ``bn=`` BatchNorm modules;
               ``attn=``/``q=``/``k=`` attention modules and their query/key projections; ``hf=``)
``layer``      a parametrised module (``name=``; ``first``/``head``/``init``/``missing``/``frozen``
               flags choosing the sites of operators; ``relu=`` modules where its dead units show;
               ``new=`` a constructor for a fresh head)
``optimizer``  the statement that builds the optimizer (``var=``, ``kind=`` sgd|adam|adamw|rmsprop)
``lr``         the line holding the learning-rate literal (``value=`` the literal as written)
``step`` ``zero_grad`` ``backward`` ``forward``  the training loop's lines
``loss``       the loss statement (``kind=`` ce|bce|mse|lm|ce_hf, ``pred=``, ``target=``, ``classes=``)
``criterion``  the statement that builds the loss module
``sched`` ``sched_step``  the LR scheduler and its step (``per=`` epoch|batch)
``clip``       an existing clip_grad_norm_ call
``cut``        a forward statement after which ``var`` is an intermediate activation
               (``upstream=`` the modules whose gradient a cut there removes)
``skip``       a forward statement that can be left out (``module=`` the module it uses)
``act``        an activation in the forward (``var``, ``next=`` the following layer, ``training=``)
``dropout``    a line holding dropout probabilities (``modules=`` the dropout modules it sets)
``logits``     the statement returning the model's output
``inputs`` ``targets`` ``normalize`` ``pixels``  the data pipeline
``mask``       an attention mask (``kind=`` causal|padding)
``attn_scores`` hand-written attention logits
``train_mode`` a ``model.train()`` call; ``loop`` the training loop's header
``broadcast``  a text edit that makes a regression target broadcast (``old=``, ``new=``)
=============  =====================================================================================
"""

from __future__ import annotations

import ast
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASES_DIR = HERE / "bases"

# Optimizer steps each base takes (checked by the manifest against what the plain run records).
BASE_STEPS = {
    "mlp_tabular": 160, "cnn_bn": 120, "lstm_classifier": 120, "transformer_encoder": 96,
    "hf_gpt2_lm": 180, "functional_mlp": 200, "accum_regression": 96, "binary_bce": 192,
    "sequential_script": 150, "resnet_small": 96, "gru_regression": 150, "decoder_lm": 150,
    "hf_bert_classifier": 120, "bf16_autocast": 128, "conv1d_signal": 144, "text_bow_bce": 192,
    "vit_counting": 100, "autoencoder_bce": 160, "set_attention_pool": 150, "recsys_mf": 144,
    "textcnn_topics": 125, "lenet_mnist_style": 120,
}

MARKER = re.compile(r"\s*# zoo:(.*)$")

# ----------------------------------------------------------------------------------------------
# bases and their markers


@dataclass
class Marker:
    tag: str
    args: dict[str, str]
    line: int  # 0-based

    def get(self, key: str, default: str = "") -> str:
        return self.args.get(key, default)

    def flag(self, key: str) -> bool:
        return key in self.args and self.args[key] not in ("0", "")

    def names(self, key: str) -> list[str]:
        return [n for n in self.args.get(key, "").split(",") if n]


@dataclass
class Base:
    name: str
    path: Path
    text: str
    lines: list[str] = field(init=False)  # code without the markers
    markers: list[Marker] = field(init=False)
    stmt_end: dict[int, int] = field(init=False)  # a statement's first line -> its last line

    def __post_init__(self) -> None:
        raw = self.text.splitlines()
        self.lines, self.markers = [], []
        for i, line in enumerate(raw):
            m = MARKER.search(line)
            self.lines.append(line[: m.start()] if m else line)
            if m:
                for seg in m.group(1).split(" | "):
                    parts = shlex.split(seg.strip())
                    if not parts:
                        continue
                    args = {}
                    for p in parts[1:]:
                        k, _, v = p.partition("=")
                        args[k] = v if _ else "1"
                    self.markers.append(Marker(parts[0], args, i))
        self.stmt_end = {}
        compound = (ast.For, ast.While, ast.If, ast.With, ast.FunctionDef, ast.ClassDef, ast.Try)
        for node in ast.walk(ast.parse(self.text)):
            if isinstance(node, ast.stmt):
                start = node.lineno - 1
                end = start if isinstance(node, compound) else node.end_lineno - 1  # type: ignore[operator]
                self.stmt_end[start] = max(self.stmt_end.get(start, start), end)

    def all(self, tag: str) -> list[Marker]:
        return [m for m in self.markers if m.tag == tag]

    def one(self, tag: str) -> Marker | None:
        found = self.all(tag)
        return found[0] if found else None

    def end(self, line: int) -> int:
        return self.stmt_end.get(line, line)

    def indent(self, line: int) -> str:
        text = self.lines[line]
        return text[: len(text) - len(text.lstrip())]

    @property
    def docstring(self) -> str:
        return ast.get_docstring(ast.parse(self.text)) or ""

    def model_var(self) -> str:
        m = self.one("model")
        return m.get("var", "model") if m else "model"

    def layers(self, flag: str | None = None) -> list[Marker]:
        return [m for m in self.all("layer") if flag is None or m.flag(flag)]

    def functional(self) -> bool:
        m = self.one("model")
        return bool(m and m.flag("functional"))


def load_base(name: str) -> Base:
    path = BASES_DIR / f"{name}.py"
    return Base(name, path, path.read_text())


def base_names() -> list[str]:
    return sorted(p.stem for p in BASES_DIR.glob("*.py") if not p.name.startswith("_"))


def strip_markers(text: str) -> str:
    return "\n".join(MARKER.sub("", line) for line in text.splitlines()) + "\n"


# ----------------------------------------------------------------------------------------------
# editing


class Edit:
    """Line edits on a base, applied all at once (indices are the base's, untouched by earlier edits)."""

    def __init__(self, base: Base) -> None:
        self.base = base
        self.before: dict[int, list[str]] = {}
        self.after: dict[int, list[str]] = {}
        self.replaced: dict[int, list[str]] = {}

    def _indented(self, line: int, code: list[str], extra: str = "") -> list[str]:
        ind = self.base.indent(line) + extra
        return [ind + c if c else c for c in code]

    def insert_after(self, line: int, *code: str) -> Edit:
        end = self.base.end(line)
        self.after.setdefault(end, []).extend(self._indented(line, list(code)))
        return self

    def insert_before(self, line: int, *code: str) -> Edit:
        self.before.setdefault(line, []).extend(self._indented(line, list(code)))
        return self

    def replace(self, line: int, *new_lines: str) -> Edit:
        self.replaced[line] = list(new_lines)
        return self

    def sub(self, line: int, old: str, new: str, count: int = 1) -> Edit:
        text = self.replaced.get(line, [self.base.lines[line]])
        joined = "\n".join(text)
        if old not in joined:
            raise NotApplicable(f"{old!r} not on line {line + 1}")
        self.replaced[line] = joined.replace(old, new, count).split("\n")
        return self

    def resub(self, line: int, pattern: str, new: str, count: int = 1) -> Edit:
        text = "\n".join(self.replaced.get(line, [self.base.lines[line]]))
        out, n = re.subn(pattern, new, text, count=count)
        if not n:
            raise NotApplicable(f"{pattern!r} not on line {line + 1}")
        self.replaced[line] = out.split("\n")
        return self

    def delete(self, line: int) -> Edit:
        end = self.base.end(line)
        for i in range(line, end + 1):
            self.replaced[i] = []
        return self

    def wrap(self, line: int, header: str) -> Edit:
        """Put the statement starting at `line` in a block opened by `header`."""
        end = self.base.end(line)
        self.before.setdefault(line, []).extend(self._indented(line, [header]))
        for i in range(line, end + 1):
            text = self.replaced.get(i, [self.base.lines[i]])
            self.replaced[i] = ["    " + t if t.strip() else t for t in text]
        return self

    def source(self) -> str:
        out: list[str] = []
        for i, line in enumerate(self.base.lines):
            out.extend(self.before.get(i, []))
            out.extend(self.replaced.get(i, [line]))
            out.extend(self.after.get(i, []))
        text = "\n".join(line.rstrip() for line in out) + "\n"
        ast.parse(text)  # a mutant must at least be Python
        return text


class NotApplicable(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# operators


@dataclass
class Variant:
    site: str
    source: str
    expected: list[dict[str, str]] | None  # None: a healthy run (no root cause)
    note: str = ""


@dataclass(frozen=True)
class Operator:
    name: str
    family: str
    why: int  # the Why class 1-6 (4: bait), 0: a classic fault
    taxonomy: str  # where the fault class is published
    summary: str
    fn: Callable[[Base], list[Variant] | None]
    healthy: bool = False
    rescales_loss: bool = False  # the loss's scale or function changes: compare losses relative to their start
    expects: str = ""  # the expected answers in words, for the README

    def apply(self, base: Base) -> list[Variant] | None:
        try:
            out = self.fn(base)
        except NotApplicable:
            return None
        return out or None


OPERATORS: list[Operator] = []


def operator(name: str, family: str, why: int, taxonomy: str, expects: str = "", healthy: bool = False, rescales_loss: bool = False):
    def register(fn: Callable[[Base], list[Variant] | None]) -> Callable[[Base], list[Variant] | None]:
        OPERATORS.append(Operator(name, family, why, taxonomy, (fn.__doc__ or "").strip(), fn, healthy, rescales_loss, expects))
        return fn
    return register


def by_name(name: str) -> Operator:
    for op in OPERATORS:
        if op.name == name:
            return op
    raise KeyError(name)


# ---- helpers


def answers(modules: list[str] | str, kinds: list[str] | str) -> list[dict[str, str]]:
    mods = [modules] if isinstance(modules, str) else modules
    ks = [kinds] if isinstance(kinds, str) else kinds
    seen, out = set(), []
    for m in mods:
        for k in ks:
            if (m, k) not in seen:
                seen.add((m, k))
                out.append({"module": m, "kind": k})
    return out


def need(marker: Marker | None) -> Marker:
    if marker is None:
        raise NotApplicable("marker missing")
    return marker


def access(base: Base, name: str) -> str:
    """Python expression reaching module `name` of the root model, as a user would write it."""
    expr = base.model_var()
    if name == "":
        return expr
    for part in name.split("."):
        if part.isdigit():
            expr += f"[{part}]"
        elif base.functional():
            expr += f'["{part}"]'
        else:
            expr += f".{part}"
    return expr


def optimizer_marker(base: Base) -> Marker:
    return need(base.one("optimizer"))


def optimizer_call(base: Base) -> tuple[Marker, str]:
    m = optimizer_marker(base)
    return m, base.lines[m.line]


def set_kwarg(text: str, key: str, value: str) -> str:
    """Set key=value in the (last) call on a one-line statement."""
    if re.search(rf"\b{key}=", text):
        return re.sub(rf"\b{key}=[^,)]+", f"{key}={value}", text, count=1)
    close = text.rstrip().rfind(")")
    if close < 0:
        raise NotApplicable("no call")
    return text[:close] + f", {key}={value}" + text[close:]


def lr_marker(base: Base) -> Marker:
    return need(base.one("lr"))


def lr_value(base: Base) -> float:
    return float(lr_marker(base).get("value"))


def nice(v: float) -> str:
    if v == 0:
        return "0.0"
    exp = math.floor(math.log10(abs(v)))
    mant = round(v / 10 ** exp, 2)
    if -3 <= exp <= 3:
        s = f"{v:.{max(0, 2 - exp)}f}".rstrip("0")
        return s + "0" if s.endswith(".") else s
    return f"{mant:g}e{exp}"


def with_lr(base: Base, factor: float) -> str:
    m = lr_marker(base)
    literal = m.get("value")
    return Edit(base).sub(m.line, literal, nice(float(literal) * factor)).source()


def model_insert_line(base: Base) -> int:
    return base.end(need(base.one("model")).line)


def head(base: Base) -> Marker:
    heads = base.layers("head")
    return need(heads[0] if heads else None)


def expand(base: Base, names: list[str]) -> list[str]:
    """The named modules, once each (the manifest adds their descendants from the recorded module list)."""
    return list(dict.fromkeys(n for n in names if n != ""))


def non_head_layers(base: Base) -> list[Marker]:
    return [m for m in base.layers() if not m.flag("head")]


def loss_marker(base: Base, kinds: tuple[str, ...]) -> Marker:
    m = need(base.one("loss"))
    if m.get("kind") not in kinds:
        raise NotApplicable("loss kind")
    return m


def rhs_replace(base: Base, edit: Edit, line: int, new_rhs: str) -> None:
    text = base.lines[line]
    if text.strip().startswith("return "):
        edit.replace(line, f"{base.indent(line)}return {new_rhs}")
        return
    lhs, eq, rhs = text.partition(" = ")
    if not eq:
        raise NotApplicable("not an assignment")
    suffix = ""
    if rhs.rstrip().endswith("/ args.accum"):
        suffix = " / args.accum"
    edit.replace(line, f"{lhs} = {new_rhs}{suffix}")


# ==============================================================================================
# family: graph (dev) -- parameters cut off from the gradient


@operator("detach_mid_forward", "graph", 1, "Why class 1; real-fault studies (Humbatova et al. 2020, 'tensor operations: wrong/missing gradient')",
          expects="every parametrised module upstream of the cut / no_gradient")
def detach_mid_forward(base: Base) -> list[Variant] | None:
    """Insert `h = h.detach()` after a statement of the forward: everything before it gets no gradient."""
    out = []
    for m in base.all("cut"):
        var = m.get("var")
        up = m.names("upstream")
        src = Edit(base).insert_after(m.line, f"{var} = {var}.detach()").source()
        out.append(Variant(f"after_{up[-1]}", src, answers(expand(base, up), "no_gradient")))
    return out


@operator("no_grad_block", "graph", 1, "Why class 1; PyTorch autograd pitfalls (torch.no_grad in the forward)",
          expects="every parametrised module upstream of the cut / no_gradient")
def no_grad_block(base: Base) -> list[Variant] | None:
    """Run the first part of the forward under `with torch.no_grad():` (a 'frozen' feature extractor that is still in the optimizer)."""
    cuts = base.all("cut")
    if not cuts:
        return None
    m = cuts[0]
    up = m.names("upstream")
    src = Edit(base).wrap(m.line, "with torch.no_grad():").source()
    return [Variant(f"through_{up[-1]}", src, answers(expand(base, up), "no_gradient"))]


@operator("unused_layer", "graph", 1, "Why class 1; DeepCrime-style structural mutation (layer removed from the forward, kept in the model)",
          expects="the skipped module / no_gradient")
def unused_layer(base: Base) -> list[Variant] | None:
    """Leave a shape-preserving layer out of the forward; it stays in the model and the optimizer."""
    out = []
    for m in base.all("skip"):
        mod = m.get("module")
        e = Edit(base)
        if m.get("replace"):
            e.replace(m.line, base.indent(m.line) + m.get("replace"))
        else:
            e.delete(m.line)
        out.append(Variant(mod, e.source(), answers(mod, "no_gradient")))
    return out


# ==============================================================================================
# family: training_loop (dev) -- the loop's handling of gradients


@operator("missing_zero_grad", "training_loop", 0, "classic (Zhang et al. 2018 / Islam et al. 2019 real-bug studies; AUTOTRAINER)",
          expects="optimizer / grads_not_zeroed")
def missing_zero_grad(base: Base) -> list[Variant] | None:
    """Delete `optimizer.zero_grad()` from the loop: gradients accumulate over all steps."""
    zs = base.all("zero_grad")
    if not zs:
        return None
    e = Edit(base)
    for m in zs:
        e.delete(m.line)
    return [Variant("", e.source(), answers("optimizer", "grads_not_zeroed"))]


@operator("zero_grad_after_backward", "training_loop", 1, "Why class 1 (zero_grad between backward and step)",
          expects="optimizer / no_gradient or not_updated")
def zero_grad_after_backward(base: Base) -> list[Variant] | None:
    """Move `zero_grad()` between `backward()` and `step()`: every step sees no gradient."""
    z, s = base.one("zero_grad"), base.one("step")
    if z is None or s is None:
        return None
    text = base.lines[z.line].strip()
    e = Edit(base).delete(z.line).insert_before(s.line, text)
    return [Variant("", e.source(), answers("optimizer", ["no_gradient", "not_updated"]))]


@operator("step_before_backward", "training_loop", 1, "Why class 1; real-bug studies (wrong order of training-loop calls)",
          expects="optimizer / no_gradient or not_updated")
def step_before_backward(base: Base) -> list[Variant] | None:
    """Call `optimizer.step()` before `loss.backward()` (zeroing stays where it was): the step never sees a gradient."""
    b, s, z = base.one("backward"), base.one("step"), base.one("zero_grad")
    if b is None or s is None or z is None:
        return None
    # the gradient of the last backward must be cleared before the next step for the fault to hold
    if not (z.line < b.line or z.line > s.line):
        return None
    if base.indent(b.line) != base.indent(s.line):
        return None  # accumulation loops step in a block of their own
    text = base.lines[s.line].strip()
    e = Edit(base).delete(s.line).insert_before(b.line, text)
    return [Variant("", e.source(), answers("optimizer", ["no_gradient", "not_updated"]))]


@operator("clip_too_strong", "training_loop", 2, "Why class 2 (clip_grad_norm_ to ~0)",
          expects="optimizer / gradient_clipping_too_strong")
def clip_too_strong(base: Base) -> list[Variant] | None:
    """Clip the gradient norm to 1e-4 before every step (a max_norm meant for something else)."""
    e = Edit(base)
    c = base.one("clip")
    if c is not None:
        e.resub(c.line, r",\s*[^,()]+\)\s*$", ", 1e-4)")
    else:
        s = need(base.one("step"))
        e.insert_before(s.line, f"torch.nn.utils.clip_grad_norm_({base.model_var()}.parameters(), max_norm=1e-4)")
    return [Variant("", e.source(), answers("optimizer", "gradient_clipping_too_strong"))]


@operator("clip_normal", "training_loop", 4, "bait: gradient clipping at a normal value", healthy=True, expects="healthy")
def clip_normal(base: Base) -> list[Variant] | None:
    """Clip the gradient norm at 1.0 (or move an existing clip to 5.0): ordinary practice."""
    e = Edit(base)
    c = base.one("clip")
    if c is not None:
        e.resub(c.line, r",\s*[^,()]+\)\s*$", ", 5.0)")
    else:
        s = need(base.one("step"))
        e.insert_before(s.line, f"torch.nn.utils.clip_grad_norm_({base.model_var()}.parameters(), max_norm=1.0)")
    return [Variant("", e.source(), None)]


@operator("step_missing", "training_loop", 1, "Why class 1; real-bug studies (Islam et al. 2019: missing optimizer call)",
          expects="optimizer / not_updated")
def step_missing(base: Base) -> list[Variant] | None:
    """Leave `optimizer.step()` out of the loop (lost in an edit): gradients are computed and never applied."""
    steps = base.all("step")
    if not steps:
        return None
    e = Edit(base)
    for m in steps:
        e.delete(m.line)
    return [Variant("", e.source(), answers("optimizer", "not_updated"))]


# ==============================================================================================
# family: schedule (dev) -- the learning rate over the run


def _drop_scheduler(base: Base, e: Edit) -> None:
    for tag in ("sched", "sched_step"):
        for m in base.all(tag):
            e.delete(m.line)


def _install_scheduler(base: Base, e: Edit, ctor: str, default_var: str) -> None:
    """Make `ctor` (with {opt} for the optimizer) the run's scheduler, stepped after every optimizer step.

    A base's own scheduler is replaced in place under its own name (so the code that reads it keeps
    working); without one, the new scheduler goes after the optimizer, an attribute in class-based code.
    """
    o, s = optimizer_marker(base), need(base.one("step"))
    opt = o.get("var")
    sched, sstep = base.one("sched"), base.one("sched_step")
    if sched is not None:
        var = sched.get("var")
        e.replace(sched.line, base.indent(sched.line) + f"{var} = " + ctor.format(opt=opt))
        if sstep is not None and sstep.get("per") == "batch":
            return
        if sstep is not None:
            e.delete(sstep.line)
        e.insert_after(s.line, f"{var}.step()")
        return
    var = f"self.{default_var}" if opt.startswith("self.") else default_var
    e.insert_after(o.line, f"{var} = " + ctor.format(opt=opt))
    e.insert_after(s.line, f"{var}.step()")


@operator("warmup_without_cap", "schedule", 2, "Why class 2 (a warmup that keeps multiplying the LR); Humbatova et al. 'suboptimal LR schedule'",
          expects="optimizer / learning_rate_too_high")
def warmup_without_cap(base: Base) -> list[Variant] | None:
    """Replace the schedule by a linear warmup written without `min(1, ...)`: the LR grows ~100x over the run, no single jump."""
    if base.name not in BASE_STEPS or any(m.flag("plateau") for m in base.all("sched")):
        return None
    warm = max(1, round(BASE_STEPS[base.name] / 100))
    e = Edit(base)
    _install_scheduler(base, e, f"torch.optim.lr_scheduler.LambdaLR({{opt}}, lambda step: (step + 1) / {warm})", "warmup")
    return [Variant("", e.source(), answers("optimizer", "learning_rate_too_high"))]


@operator("scheduler_per_batch", "schedule", 2, "Why class 2 (an epoch scheduler stepped every batch decays the LR to ~0)",
          expects="optimizer / learning_rate_too_low")
def scheduler_per_batch(base: Base) -> list[Variant] | None:
    """Step the epoch scheduler every batch (or add an ExponentialLR(gamma=0.9) meant per epoch, stepped per batch)."""
    s = need(base.one("step"))
    sched, step = base.one("sched"), base.one("sched_step")
    e = Edit(base)
    if sched is not None and sched.flag("plateau"):
        return None
    if sched is not None and sched.get("per") == "epoch" and step is not None:
        text = base.lines[step.line].strip()
        e.delete(step.line).insert_after(s.line, text)
    else:
        _install_scheduler(base, e, "torch.optim.lr_scheduler.ExponentialLR({opt}, gamma=0.9)", "scheduler")
    return [Variant("", e.source(), answers("optimizer", "learning_rate_too_low"))]


@operator("warmup_too_long", "schedule", 2, "Why class 2 (a warmup far longer than the run: the LR never leaves ~0)",
          expects="optimizer / learning_rate_too_low")
def warmup_too_long(base: Base) -> list[Variant] | None:
    """Use a linear warmup of 10,000 steps in a run of a few hundred (copied from a long recipe)."""
    if any(m.flag("plateau") for m in base.all("sched")):
        return None
    e = Edit(base)
    _install_scheduler(base, e, "torch.optim.lr_scheduler.LambdaLR({opt}, lambda step: min(1.0, (step + 1) / 10000))", "warmup")
    return [Variant("", e.source(), answers("optimizer", "learning_rate_too_low"))]


@operator("schedule_horizon_short", "schedule", 2,
          "Why class 2; Humbatova et al. 'wrong learning rate schedule' (a decay told one epoch's length for a run of several)",
          expects="optimizer / learning_rate_too_low")
def schedule_horizon_short(base: Base) -> list[Variant] | None:
    """Replace the schedule by a linear decay to 0 over an eighth of the run (the length of one epoch, say): the rest of
    the run trains at a rate of 0."""
    if base.name not in BASE_STEPS or any(m.flag("plateau") for m in base.all("sched")):
        return None
    horizon = max(2, BASE_STEPS[base.name] // 8)
    e = Edit(base)
    _install_scheduler(base, e, f"torch.optim.lr_scheduler.PolynomialLR({{opt}}, total_iters={horizon}, power=1.0)", "scheduler")
    return [Variant("", e.source(), answers("optimizer", ["learning_rate_too_low", "update_ratio_too_low"]))]


@operator("scheduler_per_micro_batch", "schedule", 2,
          "Why class 2; real-bug studies (Islam et al. 2019, 'wrong API usage': a scheduler stepped with the micro-batches)",
          expects="optimizer / learning_rate_too_low")
def scheduler_per_micro_batch(base: Base) -> list[Variant] | None:
    """In an accumulation loop, a linear decay over the run's optimizer steps is stepped after every backward() (each
    micro-batch): the schedule runs `accum` times too fast and the rate is 0 from a fraction of the run on."""
    bw, s = base.one("backward"), need(base.one("step"))
    if bw is None or base.name not in BASE_STEPS or base.one("sched") is not None:
        return None
    if len(base.indent(s.line)) <= len(base.indent(bw.line)):  # (the optimizer steps at every backward: no accumulation)
        return None
    opt = optimizer_marker(base)
    var = "self.scheduler" if opt.get("var").startswith("self.") else "scheduler"
    e = Edit(base)
    e.insert_after(opt.line, f"{var} = torch.optim.lr_scheduler.LinearLR({opt.get('var')}, start_factor=1.0, end_factor=0.0, "
                             f"total_iters={BASE_STEPS[base.name]})")
    e.insert_after(bw.line, f"{var}.step()")
    return [Variant("", e.source(), answers("optimizer", ["learning_rate_too_low", "update_ratio_too_low"]))]


@operator("warmup_bump", "schedule", 4, "bait: a one-cycle warmup to 3x the LR that anneals back", healthy=True, expects="healthy")
def warmup_bump(base: Base) -> list[Variant] | None:
    """Replace the schedule by OneCycleLR(max_lr=3 x lr): the LR rises 75x from its start, peaks, and anneals; the loss recovers."""
    if base.name not in BASE_STEPS or any(m.flag("onecycle") or m.flag("plateau") for m in base.all("sched")):
        return None
    e = Edit(base)
    ctor = f"torch.optim.lr_scheduler.OneCycleLR({{opt}}, max_lr={nice(3 * lr_value(base))}, total_steps={BASE_STEPS[base.name]})"
    _install_scheduler(base, e, ctor, "scheduler")
    return [Variant("", e.source(), None)]


@operator("manual_lr_decay_inverted", "schedule", 2, "Why class 2; Humbatova et al. 'wrong learning rate schedule' (a hand-written decay that multiplies)",
          expects="optimizer / learning_rate_too_high")
def manual_lr_decay_inverted(base: Base) -> list[Variant] | None:
    """A third into the run, the loop 'decays' every group's rate with `g["lr"] /= 0.1` (meant `*= 0.1`): a 10x jump."""
    loop = need(base.one("loop"))
    header = re.match(r"\s*for\s+(\w+)\s+in\s+range\((.+)\):", base.lines[loop.line].split("#")[0])
    if header is None:
        return None
    var, count = header.group(1), header.group(2)
    body = loop.line + 1
    if not base.lines[body].strip() or len(base.indent(body)) <= len(base.indent(loop.line)):
        return None
    opt = optimizer_marker(base).get("var")
    count = count if re.fullmatch(r"[\w.]+", count) else f"({count})"
    e = Edit(base).insert_before(body, f"if {var} == {count} // 3:", f"    for group in {opt}.param_groups:",
                                 '        group["lr"] /= 0.1')
    return [Variant("", e.source(), answers("optimizer", "learning_rate_too_high"))]


# ==============================================================================================
# family: weights (dev) -- initialisation


def _init_code(base: Base, name: str, code: str) -> list[str]:
    return ["with torch.no_grad():", f"    {access(base, name)}.{code}"]


@operator("init_scale_x50", "weights", 0, "DeepCrime 'change weights initialisation'; AUTOTRAINER / DeepDiagnosis poor initialisation",
          expects="the layer / poor_initialization or activation_out_of_range (saturation too for recurrent or tanh layers)")
def init_scale_x50(base: Base) -> list[Variant] | None:
    """Multiply one layer's initial weights by 50 (a custom init with the wrong scale)."""
    out = []
    for m in base.layers("init"):
        name = m.get("name")
        weight = m.get("weight", "weight")
        kinds = ["poor_initialization", "activation_out_of_range"] + (["saturation"] if m.flag("sat") else [])
        src = Edit(base).insert_after(model_insert_line(base), *_init_code(base, name, f"{weight}.mul_(50.0)")).source()
        out.append(Variant(name, src, answers(name, kinds)))
    return out


@operator("dying_relu_bias", "weights", 0, "DeepCrime 'change bias initialisation'; AUTOTRAINER dying ReLU",
          expects="the layer or its ReLU / dead_units or poor_initialization")
def dying_relu_bias(base: Base) -> list[Variant] | None:
    """Initialise the bias of a layer feeding a ReLU to -10: its units are dead from the first step."""
    out = []
    for m in base.layers():
        if not m.get("relu"):
            continue
        name = m.get("name")
        mods = m.names("relu")
        src = Edit(base).insert_after(model_insert_line(base), *_init_code(base, name, "bias.fill_(-10.0)")).source()
        out.append(Variant(name, src, answers([name], ["dead_units", "poor_initialization"]) + answers(mods, "dead_units")))
    return out


@operator("zero_init_layer", "weights", 0, "DeepCrime 'change weights initialisation' (zeros)",
          expects="the layer / poor_initialization, dead_units or vanishing_gradient")
def zero_init_layer(base: Base) -> list[Variant] | None:
    """Initialise a hidden layer's weights and bias to zero (symmetric units, zero activations)."""
    out = []
    for m in base.layers("init"):
        if m.flag("head") or m.flag("first") or m.flag("sat"):
            continue
        name = m.get("name")
        code = _init_code(base, name, "weight.zero_()") + [f"    {access(base, name)}.bias.zero_()"]
        src = Edit(base).insert_after(model_insert_line(base), *code).source()
        out.append(Variant(name, src, answers(name, ["poor_initialization", "dead_units", "vanishing_gradient"])))
    return out


# ==============================================================================================
# family: loss_function (dev) -- the wrong loss for the model's output


def _wrap_output(base: Base, fn: str, extra: str = "") -> str:
    m = need(base.one("logits"))
    text = base.lines[m.line]
    ind = base.indent(m.line)
    body = text.strip()
    if not body.startswith("return "):
        raise NotApplicable("output is not a return")
    expr = body[len("return "):]
    return Edit(base).replace(m.line, f"{ind}return {fn}({expr}{extra})").source()


@operator("softmax_before_ce", "loss_function", 0, "classic (DeepDiagnosis / real-bug studies: softmax before CrossEntropyLoss)",
          expects="the output layer or loss / double_softmax")
def softmax_before_ce(base: Base) -> list[Variant] | None:
    """End the model's forward in a softmax while the loss is CrossEntropyLoss (which applies log-softmax itself)."""
    loss_marker(base, ("ce",))
    h = head(base).get("name")
    src = _wrap_output(base, "torch.softmax", ", dim=-1")
    return [Variant("", src, answers([h, "loss"], "double_softmax"))]


@operator("softmax_into_nll", "loss_function", 0, "classic (real-bug studies: nll_loss given probabilities, not log-probabilities)",
          expects="the output layer or loss / double_softmax or loss_target_mismatch")
def softmax_into_nll(base: Base) -> list[Variant] | None:
    """End the forward in a softmax and score it with `nll_loss` (which expects log-probabilities)."""
    lm = loss_marker(base, ("ce",))
    h = head(base).get("name")
    e = Edit(base)
    m = need(base.one("logits"))
    if not base.lines[m.line].strip().startswith("return "):
        return None
    expr = MARKER.sub("", base.lines[m.line]).strip()[len("return "):]
    e.replace(m.line, f"{base.indent(m.line)}return torch.softmax({expr}, dim=-1)")
    rhs_replace(base, e, lm.line, f"torch.nn.functional.nll_loss({lm.get('pred')}, {lm.get('target')})")
    return [Variant("", e.source(), answers([h, "loss"], ["double_softmax", "loss_target_mismatch"]))]


@operator("sigmoid_into_bce_logits", "loss_function", 3, "Why class 3 (probabilities fed to BCEWithLogitsLoss)",
          expects="the output layer or loss / double_sigmoid")
def sigmoid_into_bce_logits(base: Base) -> list[Variant] | None:
    """End the model's forward in a sigmoid while the loss is BCEWithLogitsLoss."""
    loss_marker(base, ("bce",))
    h = head(base).get("name")
    return [Variant("", _wrap_output(base, "torch.sigmoid"), answers([h, "loss"], "double_sigmoid"))]


@operator("mse_on_class_indices", "loss_function", 5, "Why class 5; DeepCrime 'change loss function'",
          expects="loss / loss_target_mismatch", rescales_loss=True)
def mse_on_class_indices(base: Base) -> list[Variant] | None:
    """Treat classification as regression: one output unit and MSELoss against the class index."""
    lm = loss_marker(base, ("ce",))
    hm = head(base)
    e = Edit(base)
    e.resub(hm.line, r"(nn\.Linear\([^,]+,)\s*[^,)]+(\)|,)", r"\1 1\2")
    pred, target = lm.get("pred"), lm.get("target")
    rhs_replace(base, e, lm.line, f"torch.nn.functional.mse_loss({pred}.squeeze(-1), {target}.float())")
    return [Variant("", e.source(), answers("loss", "loss_target_mismatch"))]


@operator("log_of_zero", "loss_function", 0, "classic NaN from log(0) (DeepDiagnosis numerical errors; Zhang et al. 2018)",
          expects="loss / nan_inf")
def log_of_zero(base: Base) -> list[Variant] | None:
    """Write the loss by hand as log of probabilities, without clamping: log(0) once a probability saturates."""
    lm = loss_marker(base, ("ce", "bce"))
    pred, target = lm.get("pred"), lm.get("target")
    e = Edit(base)
    if lm.get("kind") == "ce":
        rhs_replace(base, e, lm.line, f"torch.nn.functional.nll_loss(torch.log(torch.softmax({pred}, dim=-1)), {target})")
    else:
        p = f"torch.sigmoid({pred})"
        rhs_replace(base, e, lm.line, f"-({target} * torch.log({p}) + (1 - {target}) * torch.log(1 - {p})).mean()")
    return [Variant("", e.source(), answers("loss", "nan_inf"))]


# ==============================================================================================
# family: regularisation (dev) -- dropout, train/eval mode, weight decay


@operator("dropout_too_high", "regularisation", 3, "Why class 3; DeepCrime 'change dropout rate' (p=0.9, a keep-probability read as a drop rate)",
          expects="the dropout module or the layer after it / dropout_too_high")
def dropout_too_high(base: Base) -> list[Variant] | None:
    """Set a dropout rate to 0.9 (or add `F.dropout(x, 0.9)` after an activation when the model has none)."""
    ds = base.all("dropout")
    if ds:
        m = ds[0]
        e = Edit(base).resub(m.line, r"\b0\.\d+\b", "0.9", count=0)
        return [Variant("", e.source(), answers(m.names("modules"), "dropout_too_high"))]
    out = []
    for m in base.all("act"):
        var, nxt = m.get("var"), m.get("next")
        training = m.get("training", "self.training")
        src = Edit(base).insert_after(m.line, f"{var} = torch.nn.functional.dropout({var}, p=0.9, training={training})").source()
        out.append(Variant(f"before_{nxt}", src, answers([nxt], "dropout_too_high")))
        break
    return out


@operator("dropout_light", "regularisation", 4, "bait: dropout 0.1", healthy=True, expects="healthy")
def dropout_light(base: Base) -> list[Variant] | None:
    """Add dropout p=0.1 where the model has none (or set a zero dropout rate to 0.1)."""
    ds = base.all("dropout")
    if ds:
        m = ds[0]
        if not re.search(r"\b0\.0\b", base.lines[m.line]):
            return None
        return [Variant("", Edit(base).resub(m.line, r"\b0\.0\b", "0.1", count=0).source(), None)]
    for m in base.all("act"):
        var = m.get("var")
        training = m.get("training", "self.training")
        return [Variant("", Edit(base).insert_after(m.line, f"{var} = torch.nn.functional.dropout({var}, p=0.1, training={training})").source(), None)]
    return None


@operator("eval_mode_bn", "regularisation", 0, "classic (BatchNorm left in eval mode; Humbatova et al. 'training mode')",
          expects="each BatchNorm module / frozen")
def eval_mode_bn(base: Base) -> list[Variant] | None:
    """Put the model in eval mode before training (a validation call with no `model.train()` after it): BatchNorm never updates its statistics."""
    m = need(base.one("model"))
    bns = m.names("bn")
    if not bns:
        return None
    e = Edit(base)
    for t in base.all("train_mode"):
        e.delete(t.line)
    e.insert_after(m.line, f"{base.model_var()}.eval()")
    return [Variant("", e.source(), answers(bns, "frozen"))]


@operator("weight_decay_normal", "regularisation", 4, "bait: an ordinary weight decay", healthy=True, expects="healthy")
def weight_decay_normal(base: Base) -> list[Variant] | None:
    """Set an ordinary weight decay (1e-4 for SGD, 0.01 for Adam-style optimizers)."""
    m, text = optimizer_call(base)
    value = "1e-4" if m.get("kind") == "sgd" else "0.01"
    return [Variant("", Edit(base).replace(m.line, set_kwarg(text, "weight_decay", value)).source(), None)]


# ==============================================================================================
# family: activation (dev)

RELU_LIKE = [
    (r"F\.relu\(", "torch.sigmoid("), (r"torch\.relu\(", "torch.sigmoid("), (r"F\.gelu\(", "torch.sigmoid("),
    (r"nn\.ReLU\(\)", "nn.Sigmoid()"), (r"nn\.GELU\(\)", "nn.Sigmoid()"), (r"nn\.SiLU\(\)", "nn.Sigmoid()"),
    (r"nn\.LeakyReLU\([^)]*\)", "nn.Sigmoid()"),
]


@operator("sigmoid_everywhere", "activation", 0, "DeepCrime 'change activation function'; DeepDiagnosis saturation / vanishing gradient",
          expects="the first layer / vanishing_gradient, or a hidden layer / saturation")
def sigmoid_everywhere(base: Base) -> list[Variant] | None:
    """Replace every ReLU-family activation of the model by a sigmoid."""
    e = Edit(base)
    changed = False
    for i, line in enumerate(base.lines):
        new = line
        for pat, rep in RELU_LIKE:
            new = re.sub(pat, rep, new)
        if new != line:
            e.replace(i, new)
            changed = True
    if not changed:
        return None
    layers = [m.get("name") for m in non_head_layers(base)]
    acts = [n for m in base.layers() for n in m.names("relu")] + (need(base.one("model")).names("relu"))
    exp = answers(layers, ["vanishing_gradient", "saturation"]) + answers(acts, "saturation")
    return [Variant("", e.source(), exp)]


@operator("relu_on_output", "activation", 0, "DeepCrime 'add activation function' to the output layer",
          expects="the output layer / dead_units or activation_out_of_range (regression: also loss / loss_target_mismatch)")
def relu_on_output(base: Base) -> list[Variant] | None:
    """Apply a ReLU to the model's output logits/predictions."""
    kind = need(base.one("loss")).get("kind")
    if kind not in ("ce", "bce", "mse"):
        return None
    h = head(base).get("name")
    exp = answers(h, ["dead_units", "activation_out_of_range"])
    if kind == "mse":  # standardised regression targets: half of them are out of a ReLU's reach
        exp += answers("loss", "loss_target_mismatch")
    return [Variant("", _wrap_output(base, "torch.relu"), exp)]


# ==============================================================================================
# family: attention_scale (dev)


@operator("attention_temperature", "attention_scale", 6, "Why class 6 (attention logits scaled up: softmax collapses onto one key)",
          expects="an attention module / attention_collapse or attention_entropy_collapse")
def attention_temperature(base: Base) -> list[Variant] | None:
    """Multiply the attention logits by sqrt(d) instead of dividing (x d), or by 100."""
    m = need(base.one("attn_scores"))
    attn = need(base.one("model")).names("attn")
    exp = answers(attn, ["attention_collapse", "attention_entropy_collapse"])
    text = base.lines[m.line]
    match = re.search(r"/ (math\.sqrt\([^)]*\))", text)
    if not match:
        return None
    a = Edit(base).replace(m.line, text.replace(match.group(0), f"* {match.group(1)}")).source()
    b = Edit(base).replace(m.line, text.replace(match.group(0), f"* 100 / {match.group(1)}")).source()
    return [Variant("times_sqrt_d", a, exp), Variant("times_100", b, exp)]


@operator("query_key_init_x10", "attention_scale", 6, "Why class 6; DeepCrime 'change weights initialisation' on the query/key projections",
          expects="an attention module / attention_collapse or attention_entropy_collapse; its q/k projection / poor_initialization")
def query_key_init_x10(base: Base) -> list[Variant] | None:
    """Scale the query and key projections' initial weights by 10 (attention logits x100)."""
    mm = need(base.one("model"))
    attn, qs, ks = mm.names("attn"), mm.names("q"), mm.names("k")
    if not attn or not qs:
        return None
    code = ["with torch.no_grad():"]
    if mm.get("hf") == "gpt2":
        width = int(mm.get("n_embd", "32"))
        for q in qs:
            code.append(f"    {access(base, q)}.weight[:, :{2 * width}].mul_(10.0)")
    elif mm.get("inproj"):
        width = int(mm.get("inproj"))
        for q in qs:
            code.append(f"    {access(base, q)}.in_proj_weight[:{2 * width}].mul_(10.0)")
    else:
        for name in qs + ks:
            code.append(f"    {access(base, name)}.weight.mul_(10.0)")
    src = Edit(base).insert_after(model_insert_line(base), *code).source()
    exp = answers(attn, ["attention_collapse", "attention_entropy_collapse"]) + answers(qs + ks, "poor_initialization")
    return [Variant("", src, exp)]


@operator("clip_value_too_small", "training_loop", 2, "Why class 2 (clip_grad_value_ to ~0)",
          expects="optimizer / gradient_clipping_too_strong")
def clip_value_too_small(base: Base) -> list[Variant] | None:
    """Clip every gradient element to +-1e-5 before the step (clip_grad_value_ with a norm-sized threshold)."""
    e = Edit(base)
    c = base.one("clip")
    code = f"torch.nn.utils.clip_grad_value_({base.model_var()}.parameters(), clip_value=1e-5)"
    if c is not None:
        e.replace(c.line, base.indent(c.line) + code)
    else:
        e.insert_before(need(base.one("step")).line, code)
    return [Variant("", e.source(), answers("optimizer", "gradient_clipping_too_strong"))]


@operator("all_layers_init_tiny", "weights", 0, "DeepCrime 'change weights initialisation' (std 1e-3 everywhere); AUTOTRAINER vanishing gradient",
          expects="a layer / poor_initialization or vanishing_gradient")
def all_layers_init_tiny(base: Base) -> list[Variant] | None:
    """Initialise every Linear/Conv weight from N(0, 1e-3) in an init loop (the signal vanishes through depth)."""
    mm = need(base.one("model"))
    if base.functional() or mm.get("hf"):
        return None
    code = [f"for module in {base.model_var()}.modules():",
            "    if isinstance(module, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)):",
            "        torch.nn.init.normal_(module.weight, std=1e-3)"]
    src = Edit(base).insert_after(model_insert_line(base), *code).source()
    layers = [m.get("name") for m in base.layers()]
    return [Variant("", src, answers(layers, ["poor_initialization", "vanishing_gradient"]))]


@operator("labels_shifted_twice", "loss_function", 5, "Why class 5 (labels shifted by hand for a model that shifts them itself: Hugging Face causal-LM loss)",
          expects="loss / loss_target_mismatch")
def labels_shifted_twice(base: Base) -> list[Variant] | None:
    """Pass `input_ids[:, :-1]` and pre-shifted `labels=input_ids[:, 1:]` to a Hugging Face causal LM (which shifts again)."""
    mm, f = need(base.one("model")), need(base.one("forward"))
    if mm.get("hf") != "gpt2":
        return None
    e = Edit(base).sub(f.line, "model(input_ids=input_ids, labels=input_ids)", "model(input_ids=input_ids[:, :-1], labels=input_ids[:, 1:])")
    return [Variant("", e.source(), answers("loss", "loss_target_mismatch"))]


@operator("bce_targets_out_of_range", "loss_function", 5,
          "Why class 5 (targets outside [0, 1] for a binary cross-entropy: labels as -1/+1, images scaled to [-1, 1])",
          expects="loss / loss_target_mismatch")
def bce_targets_out_of_range(base: Base) -> list[Variant] | None:
    """Feed BCEWithLogitsLoss targets in [-1, 1] (SVM-style labels, or images normalised for a tanh generator)."""
    lm = loss_marker(base, ("bce",))
    target = lm.get("target")
    text = base.lines[lm.line]
    if f", {target})" not in text:
        return None
    e = Edit(base).sub(lm.line, f", {target})", f", 2 * {target} - 1)")
    return [Variant("", e.source(), answers("loss", "loss_target_mismatch"))]


@operator("sigmoid_output_for_regression", "loss_function", 5,
          "Why class 5 (an output range that cannot reach the targets: sigmoid output, standardised targets); "
          "DeepCrime 'change activation function' of the output",
          expects="loss / loss_target_mismatch, or the output layer / saturation")
def sigmoid_output_for_regression(base: Base) -> list[Variant] | None:
    """End a regression model in a sigmoid while its MSE targets are standardised (half of them negative)."""
    loss_marker(base, ("mse",))
    h = head(base).get("name")
    return [Variant("", _wrap_output(base, "torch.sigmoid"), answers("loss", "loss_target_mismatch") + answers(h, "saturation"))]


@operator("l2_penalty_dominant", "regularisation", 2, "Why class 2 (a weight penalty that dominates the update); DeepCrime 'add weights regularisation'",
          expects="optimizer or loss / weight_decay_too_high")
def l2_penalty_dominant(base: Base) -> list[Variant] | None:
    """Add an L2 penalty by hand with lambda = 1.0: the penalty term outweighs the data loss."""
    lm = need(base.one("loss"))
    if base.lines[lm.line].strip().startswith("return "):
        return None
    code = f"loss = loss + 1.0 * sum(p.pow(2).sum() for p in {base.model_var()}.parameters())"
    src = Edit(base).insert_after(lm.line, code).source()
    return [Variant("", src, answers(["optimizer", "loss"], "weight_decay_too_high"))]


@operator("head_lr_x1000", "learning_rate", 0, "DeepCrime 'change learning rate' (one parameter group)",
          expects="optimizer / learning_rate_too_high, or the head / update_ratio_too_high")
def head_lr_x1000(base: Base) -> list[Variant] | None:
    """Give the output layer its own parameter group with 1000x the learning rate (a misplaced 'discriminative LR')."""
    m, text = optimizer_call(base)
    model = base.model_var()
    if f"{model}.parameters()" not in text or any(x.flag("onecycle") for x in base.all("sched")):
        return None
    h = head(base).get("name")
    groups = (f'[{{"params": [p for n, p in {model}.named_parameters() if not n.startswith("{h}.")]}}, '
              f'{{"params": {access(base, h)}.parameters(), "lr": {nice(lr_value(base) * 1000)}}}]')
    new = text.replace(f"{model}.parameters()", groups)
    return [Variant("", Edit(base).replace(m.line, new).source(), answers("optimizer", "learning_rate_too_high") + answers(h, "update_ratio_too_high"))]


@operator("missing_value_nan", "training_data", 0, "classic NaN in the training data (a missing value), DeepDiagnosis numerical errors",
          expects="input / nan_inf")
def missing_value_nan(base: Base) -> list[Variant] | None:
    """Leave one missing value as NaN in the raw inputs."""
    i = need(base.one("inputs"))
    var = i.get("var")
    return [Variant("", Edit(base).insert_after(i.line, f'{var}[7, 3] = float("nan")').source(), answers("input", "nan_inf"))]


@operator("optimizer_only_head", "param_registration", 0, "classic (layers missing from the optimizer: a fine-tuning recipe's head-only optimizer)",
          expects="any layer but the head, or the optimizer / not_updated")
def optimizer_only_head(base: Base) -> list[Variant] | None:
    """Build the optimizer over the output layer's parameters only (copied from a head-only fine-tuning recipe)."""
    m, text = optimizer_call(base)
    model = base.model_var()
    if f"{model}.parameters()" not in text or base.functional():
        return None
    h = head(base).get("name")
    new = text.replace(f"{model}.parameters()", f"{access(base, h)}.parameters()")
    layers = [x.get("name") for x in non_head_layers(base)]
    # (or the optimizer: the fault is in what it was given, as the fault probes' independent authors all accept)
    return [Variant("", Edit(base).replace(m.line, new).source(), answers([*layers, "optimizer"], "not_updated"))]


# ==============================================================================================
# family: param_registration (held out) -- what the optimizer holds


@operator("layer_missing_from_optimizer", "param_registration", 0, "classic (Humbatova et al. 'missing parameters in the optimizer')",
          expects="the layer, or the optimizer / not_updated")
def layer_missing_from_optimizer(base: Base) -> list[Variant] | None:
    """Build the optimizer over every parameter except one module's (a name filter that drops it)."""
    m, text = optimizer_call(base)
    model = base.model_var()
    if f"{model}.parameters()" not in text:
        return None
    out = []
    for layer in base.layers("missing"):
        name = layer.get("name")
        new = text.replace(f"{model}.parameters()", f'[p for n, p in {model}.named_parameters() if not n.startswith("{name}.")]')
        out.append(Variant(name, Edit(base).replace(m.line, new).source(), answers([name, "optimizer"], "not_updated")))
    return out


@operator("head_replaced_after_optimizer", "param_registration", 1, "Why class 1 (a head replaced after the optimizer was built)",
          expects="the head / not_updated (or no_gradient)")
def head_replaced_after_optimizer(base: Base) -> list[Variant] | None:
    """Replace the output layer after building the optimizer (to 'reset the classifier'): the new head is never stepped."""
    o = optimizer_marker(base)
    h = head(base)
    new = h.get("new")
    if not new or base.functional():
        return None
    name = h.get("name")
    src = Edit(base).insert_after(o.line, f"{access(base, name)} = {new}").source()
    return [Variant("", src, answers(name, ["not_updated", "no_gradient"]))]


@operator("frozen_layer", "param_registration", 0, "classic (frozen layer left in by mistake; Humbatova et al.)",
          expects="the layer / frozen")
def frozen_layer(base: Base) -> list[Variant] | None:
    """Set `requires_grad_(False)` on a layer that should train (left over from an experiment)."""
    out = []
    for layer in base.layers("frozen"):
        name = layer.get("name")
        src = Edit(base).insert_after(model_insert_line(base), f"{access(base, name)}.requires_grad_(False)").source()
        out.append(Variant(name, src, answers(name, "frozen")))
    return out


@operator("frozen_lower_layers_intentional", "param_registration", 4, "bait: an intentionally frozen lower part, optimizer over the trainable rest",
          healthy=True, expects="healthy")
def frozen_lower_layers_intentional(base: Base) -> list[Variant] | None:
    """Freeze the first layer / embeddings on purpose and give the optimizer only the trainable parameters."""
    m, text = optimizer_call(base)
    model = base.model_var()
    firsts = base.layers("first")
    if not firsts or f"{model}.parameters()" not in text:
        return None
    name = firsts[0].get("name")
    e = Edit(base).insert_after(model_insert_line(base), f"{access(base, name)}.requires_grad_(False)")
    e.replace(m.line, text.replace(f"{model}.parameters()", f"(p for p in {model}.parameters() if p.requires_grad)"))
    return [Variant(name, e.source(), None)]


@operator("model_rebuilt_after_optimizer", "param_registration", 1, "Why class 1 (the optimizer steps a model object that is no longer trained)",
          expects="optimizer / no_gradient or not_updated")
def model_rebuilt_after_optimizer(base: Base) -> list[Variant] | None:
    """Build the model again after the optimizer (a copied setup cell): the optimizer holds the old, unused parameters."""
    mm, o = need(base.one("model")), optimizer_marker(base)
    if mm.line > o.line:
        return None
    stmt = [base.lines[i] for i in range(mm.line, base.end(mm.line) + 1)]
    ind = base.indent(mm.line)
    code = [s[len(ind):] if s.startswith(ind) else s for s in stmt]
    src = Edit(base).insert_after(o.line, *code).source()
    return [Variant("", src, answers("optimizer", ["no_gradient", "not_updated"]))]


# ==============================================================================================
# family: precision (held out)


@operator("bf16_weights", "precision", 1, "Why class 1 (weights in bf16: small updates round away)",
          expects="optimizer or a layer / not_updated or update_ratio_too_low")
def bf16_weights(base: Base) -> list[Variant] | None:
    """Cast the model's weights to bfloat16 (and its float inputs), training the bf16 weights directly."""
    mm, f = need(base.one("model")), need(base.one("forward"))
    model = base.model_var()
    e = Edit(base).insert_after(mm.line, f"{model} = {model}.to(torch.bfloat16)")
    text = base.lines[f.line]
    if mm.get("hf") or f.flag("ids"):
        pass  # token ids stay integers; the model computes in bf16
    else:
        call = re.search(rf"{re.escape(model)}\(([^()]*(?:\([^()]*\))?[^()]*)\)", text)
        if not call:
            return None
        first, comma, rest = call.group(1).partition(", ")
        e.replace(f.line, text.replace(call.group(0), f"{model}({first}.to(torch.bfloat16){comma}{rest}).float()"))
    layers = [m.get("name") for m in base.layers()]
    exp = answers(["optimizer"] + layers, ["not_updated", "update_ratio_too_low"])
    return [Variant("", e.source(), exp)]


@operator("autocast_bf16", "precision", 4, "bait: bf16 autocast mixed precision", healthy=True, expects="healthy")
def autocast_bf16(base: Base) -> list[Variant] | None:
    """Run the forward and the loss under `torch.autocast("cpu", dtype=torch.bfloat16)` (float32 weights)."""
    f, lm = need(base.one("forward")), need(base.one("loss"))
    if "autocast" in base.text:
        return None
    if lm.line == f.line:
        return [Variant("", Edit(base).wrap(f.line, 'with torch.autocast("cpu", dtype=torch.bfloat16):').source(), None)]
    if lm.line != base.end(f.line) + 1 or base.indent(lm.line) != base.indent(f.line):
        return None
    e = Edit(base).wrap(f.line, 'with torch.autocast("cpu", dtype=torch.bfloat16):')
    e.replace(lm.line, "    " + base.lines[lm.line])
    return [Variant("", e.source(), None)]


# ==============================================================================================
# family: learning_rate (held out)


@operator("lr_x100", "learning_rate", 0, "DeepCrime 'change learning rate'; AUTOTRAINER / DeepDiagnosis exploding loss",
          expects="optimizer / learning_rate_too_high")
def lr_x100(base: Base) -> list[Variant] | None:
    """Multiply the learning rate by 100."""
    return [Variant("", with_lr(base, 100.0), answers("optimizer", "learning_rate_too_high"))]


@operator("lr_div1e4", "learning_rate", 0, "DeepCrime 'change learning rate'; AUTOTRAINER slow convergence",
          expects="optimizer / learning_rate_too_low")
def lr_div1e4(base: Base) -> list[Variant] | None:
    """Divide the learning rate by 10,000."""
    return [Variant("", with_lr(base, 1e-4), answers("optimizer", "learning_rate_too_low"))]


@operator("lr_finetune_small", "learning_rate", 4, "bait: a smaller fine-tuning learning rate where the loss still falls", healthy=True, expects="healthy")
def lr_finetune_small(base: Base) -> list[Variant] | None:
    """Halve the learning rate (a cautious fine-tuning rate)."""
    return [Variant("", with_lr(base, 0.5), None)]


# ==============================================================================================
# family: optimiser (held out)


@operator("weight_decay_dominant", "optimiser", 2, "Why class 2; DeepCrime 'change optimiser hyperparameters' (weight decay)",
          expects="optimizer / weight_decay_too_high")
def weight_decay_dominant(base: Base) -> list[Variant] | None:
    """Set a weight decay so large that lr x wd removes ~5% of every weight per step (the decay dominates the update)."""
    m, text = optimizer_call(base)
    wd = 0.05 / lr_value(base)
    return [Variant("", Edit(base).replace(m.line, set_kwarg(text, "weight_decay", nice(wd))).source(), answers("optimizer", "weight_decay_too_high"))]


@operator("adam_eps_large", "optimiser", 2, "Why class 2; DeepCrime 'change optimiser hyperparameters' (eps)",
          expects="optimizer / optimizer_eps_too_high")
def adam_eps_large(base: Base) -> list[Variant] | None:
    """Set eps=1.0 on an Adam-style optimizer (Adam, AdamW, RMSprop, Adagrad): updates shrink to lr x g / eps."""
    m, text = optimizer_call(base)
    if m.get("kind") not in ("adam", "adamw", "rmsprop", "adagrad"):
        return None
    return [Variant("", Edit(base).replace(m.line, set_kwarg(text, "eps", "1.0")).source(), answers("optimizer", "optimizer_eps_too_high"))]


@operator("sgd_to_adam_same_lr", "optimiser", 0, "DeepCrime 'change optimisation function' (keeping the SGD learning rate)",
          expects="optimizer / learning_rate_too_high")
def sgd_to_adam_same_lr(base: Base) -> list[Variant] | None:
    """Switch SGD to Adam and keep SGD's learning rate (0.05-0.1 is far too high for Adam)."""
    m, text = optimizer_call(base)
    if m.get("kind") != "sgd":
        return None
    new = text.replace("optim.SGD(", "optim.Adam(")
    new = re.sub(r",\s*(momentum|nesterov|dampening)=[^,)]+", "", new)
    return [Variant("", Edit(base).replace(m.line, new).source(), answers("optimizer", "learning_rate_too_high"))]


# ==============================================================================================
# family: training_data (held out)


@operator("labels_shuffled", "training_data", 0, "DeepCrime 'change labels of training data' (100%); misaligned joins",
          expects="input / loss_not_decreasing")
def labels_shuffled(base: Base) -> list[Variant] | None:
    """Shuffle the targets against the inputs (labels no longer belong to their rows)."""
    t = need(base.one("targets"))
    var = t.get("var")
    src = Edit(base).insert_after(t.line, f"{var} = {var}[torch.randperm(len({var}))]").source()
    return [Variant("", src, answers("input", "loss_not_decreasing"))]


@operator("label_noise_60", "training_data", 0, "DeepCrime 'change labels of training data' (60% relabelled at random)",
          expects="input / loss_not_decreasing")
def label_noise_60(base: Base) -> list[Variant] | None:
    """Relabel 60% of the training rows at random."""
    t = need(base.one("targets"))
    var, kind = t.get("var"), t.get("kind")
    if kind == "class":
        classes = need(base.one("loss")).get("classes") or t.get("classes")
        if not classes:
            return None
        rand = f"torch.randint_like({var}, {classes})"
    elif kind == "binary":
        rand = f"torch.randint_like({var}, 2)"
    else:
        return None
    src = Edit(base).insert_after(t.line, f"{var} = torch.where(torch.rand({var}.shape) < 0.6, {rand}, {var})").source()
    return [Variant("", src, answers("input", "loss_not_decreasing"))]


@operator("unscaled_inputs", "training_data", 0, "DeepCrime 'remove data normalisation'; classic unnormalised inputs",
          expects="input / activation_out_of_range")
def unscaled_inputs(base: Base) -> list[Variant] | None:
    """Remove the standardisation of raw features (sensor units of 10-1000)."""
    n = need(base.one("normalize"))
    return [Variant("", Edit(base).delete(n.line).source(), answers("input", "activation_out_of_range"))]


@operator("raw_pixels_0_255", "training_data", 3, "Why class 3 (integer-range 0-255 image inputs); DeepCrime 'remove data normalisation'",
          expects="input / activation_out_of_range")
def raw_pixels_0_255(base: Base) -> list[Variant] | None:
    """Forget the 1/255 scaling of uint8 images: inputs range 0-255."""
    p = need(base.one("pixels"))
    e = Edit(base).resub(p.line, r"\s*/\s*255(\.0*)?", "")
    return [Variant("", e.source(), answers("input", "activation_out_of_range"))]


@operator("constant_feature_zero_std", "training_data", 0, "classic NaN from division by zero (a constant feature standardised by its std of 0)",
          expects="input / nan_inf")
def constant_feature_zero_std(base: Base) -> list[Variant] | None:
    """Make one input channel constant (a dead sensor) before the standardisation divides by its std."""
    n = need(base.one("normalize"))
    target = n.get("zero")
    if not target:
        return None
    return [Variant("", Edit(base).insert_before(n.line, f"{target} = 0.0").source(), answers("input", "nan_inf"))]


@operator("sparse_inputs", "training_data", 4, "bait: sparse inputs (80% of features exactly zero)", healthy=True, expects="healthy")
def sparse_inputs(base: Base) -> list[Variant] | None:
    """Zero 80% of the input features at random (the labels are made from the sparse features)."""
    i = need(base.one("inputs"))
    if not i.flag("sparse"):
        return None
    var = i.get("var")
    return [Variant("", Edit(base).insert_after(i.line, f"{var} = {var} * (torch.rand({var}.shape) < 0.2)").source(), None)]


@operator("large_scale_targets", "training_data", 4, "bait: regression targets in large units (large gradient norms, the loss falls)",
          healthy=True, rescales_loss=True, expects="healthy")
def large_scale_targets(base: Base) -> list[Variant] | None:
    """Express the regression target in units 10x larger (no rescaling)."""
    t = need(base.one("targets"))
    if t.get("kind") != "real":
        return None
    var = t.get("var")
    return [Variant("", Edit(base).insert_after(t.line, f"{var} = {var} * 10.0").source(), None)]


# ==============================================================================================
# family: loss_computation (held out)


@operator("loss_sum_reduction", "loss_computation", 3, "Why class 3 (a summed loss over a large batch); Humbatova et al. 'wrong reduction'",
          expects="loss / loss_scale_too_high", rescales_loss=True)
def loss_sum_reduction(base: Base) -> list[Variant] | None:
    """Sum the loss over the batch (`reduction="sum"`) instead of averaging."""
    lm = need(base.one("loss"))
    c = base.one("criterion")
    e = Edit(base)
    if lm.flag("fn"):
        text = base.lines[lm.line]
        close = text.rstrip().rfind(")")
        e.replace(lm.line, text[:close] + ', reduction="sum"' + text[close:])
    elif c is not None:
        e.resub(c.line, r"(nn\.(?:CrossEntropyLoss|MSELoss|BCEWithLogitsLoss|L1Loss))\(\)", r'\1(reduction="sum")')
    else:
        return None
    return [Variant("", e.source(), answers("loss", "loss_scale_too_high"))]


@operator("target_broadcast", "loss_computation", 5, "Why class 5 ([B, 1] against [B] in a regression loss: broadcast to [B, B])",
          expects="loss / loss_target_mismatch")
def target_broadcast(base: Base) -> list[Variant] | None:
    """Make the prediction [B, 1] and the target [B] (or the reverse) in MSELoss: they broadcast to [B, B]."""
    b = need(base.one("broadcast"))
    e = Edit(base).sub(b.line, b.get("old"), b.get("new"))
    return [Variant("", e.source(), answers("loss", "loss_target_mismatch"))]


@operator("output_layer_scale_x30", "loss_computation", 5,
          "Why class 5 (an initial loss far from ln C); DeepCrime 'change weights initialisation' on the output layer",
          expects="the output layer / poor_initialization or activation_out_of_range")
def output_layer_scale_x30(base: Base) -> list[Variant] | None:
    """Scale the classifier's initial weights by 30: the first loss is many times ln C."""
    kind = need(base.one("loss")).get("kind")
    if kind not in ("ce", "ce_hf", "lm", "nll"):
        return None
    name = head(base).get("name")
    src = Edit(base).insert_after(model_insert_line(base), *_init_code(base, name, "weight.mul_(30.0)")).source()
    return [Variant("", src, answers(name, ["poor_initialization", "activation_out_of_range"]))]


# ==============================================================================================
# family: attention_mask (held out)


@operator("attention_mask_single_key", "attention_mask", 6, "Why class 6 (a mask that leaves one key per query)",
          expects="an attention module (or the input mask) / attention_collapse or attention_entropy_collapse")
def attention_mask_single_key(base: Base) -> list[Variant] | None:
    """Build the mask so that each query sees one key only ([CLS] for padding masks; itself for a causal mask)."""
    m = need(base.one("mask"))
    attn = need(base.one("model")).names("attn")
    var = m.get("var")
    ind = base.indent(m.line)
    kinds = ["attention_collapse", "attention_entropy_collapse"]
    if m.get("kind") == "padding":
        new = f"{ind}{var} = (input_ids == CLS).long()"
        exp = answers(attn + ["input"], kinds)
    elif m.get("kind") == "key_padding":
        new = f"{ind}{var} = torch.arange(MAX_SET)[None, :].expand(len(sets), -1) > 0"
        exp = answers(attn + ["input"], kinds)
    else:
        new = f"{ind}{var} = ~torch.eye(T, dtype=torch.bool)"
        exp = answers(attn, kinds)
    return [Variant("", Edit(base).replace(m.line, new).source(), exp)]


@operator("attention_mask_inverted", "attention_mask", 3, "Why class 3 (an inverted attention mask: keep/mask conventions swapped)",
          expects="padding: an attention module or input / attention_collapse; causal: an attention module / nan_inf")
def attention_mask_inverted(base: Base) -> list[Variant] | None:
    """Invert the mask (attend to padding only; or a causal mask in the keep-convention given to nn.MultiheadAttention)."""
    m = need(base.one("mask"))
    attn = need(base.one("model")).names("attn")
    var = m.get("var")
    ind = base.indent(m.line)
    if m.get("kind") == "padding":
        new = f"{ind}{var} = (input_ids == PAD).long()"
        exp = answers(attn + ["input"], ["attention_collapse", "attention_entropy_collapse"])
    elif m.get("kind") == "key_padding":
        new = f"{ind}{var} = torch.arange(MAX_SET)[None, :] < lengths[:, None]"
        exp = answers(attn + ["input"], ["attention_collapse", "attention_entropy_collapse"])
    else:
        new = f"{ind}{var} = torch.tril(torch.ones(T, T, dtype=torch.bool))"
        exp = answers(attn, ["nan_inf", "attention_collapse"])
    return [Variant("", Edit(base).replace(m.line, new).source(), exp)]


@operator("attention_mask_last_key_only", "attention_mask", 6, "Why class 6 (a mask built from the wrong token: each query sees only the last key)",
          expects="an attention module (or the input mask) / attention_collapse or attention_entropy_collapse")
def attention_mask_last_key_only(base: Base) -> list[Variant] | None:
    """Build the mask from the end-of-sequence position only ([SEP], the last set element, the first token for a causal LM)."""
    m = need(base.one("mask"))
    attn = need(base.one("model")).names("attn")
    var = m.get("var")
    ind = base.indent(m.line)
    kinds = ["attention_collapse", "attention_entropy_collapse"]
    if m.get("kind") == "padding":
        code = [f"{ind}{var} = (input_ids == SEP).long()"]
        exp = answers(attn + ["input"], kinds)
    elif m.get("kind") == "key_padding":
        code = [f"{ind}{var} = torch.arange(MAX_SET)[None, :] != (lengths[:, None] - 1)"]
        exp = answers(attn + ["input"], kinds)
    else:
        code = [f"{ind}{var} = torch.ones(T, T, dtype=torch.bool)", f"{ind}{var}[:, 0] = False"]
        exp = answers(attn, kinds)
    return [Variant("", Edit(base).replace(m.line, *code).source(), exp)]


# ----------------------------------------------------------------------------------------------


@dataclass
class Mutant:
    id: str
    base: str
    operator: str  # "" for the base itself
    site: str
    family: str
    why: int  # 4 for healthy runs (bases and bait)
    healthy: bool
    rescales_loss: bool
    expected: list[dict[str, str]] | None
    source: str


def site_slug(site: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "-", site).strip("-")


def generate(bases: list[str] | None = None, operators: list[Operator] | None = None,
             pairs: Callable[[str, Operator], bool] | None = None) -> list[Mutant]:
    """Every base (as a healthy run) and every (base, operator, site) mutant the pairs filter allows."""
    out: list[Mutant] = []
    for name in bases or base_names():
        base = load_base(name)
        out.append(Mutant(f"{name}__base", name, "", "", "base", 4, True, False, None, strip_markers(base.text)))
        for op in operators or OPERATORS:
            if pairs is not None and not pairs(name, op):
                continue
            for v in op.apply(base) or []:
                mid = f"{name}__{op.name}" + (f"__{site_slug(v.site)}" if v.site else "")
                expected = None if v.expected is None else [dict(t) for t in dict.fromkeys(tuple(sorted(d.items())) for d in v.expected)]
                out.append(Mutant(mid, name, op.name, v.site, op.family, op.why, op.healthy, op.rescales_loss,
                                  expected, strip_markers(v.source)))
    return out
