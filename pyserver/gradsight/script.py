"""What a training script is made of, read with ``ast``: its optimizers, schedulers, training loop, loss and
forward calls, the statements that touch a model's weights. Fixes are placed with these, never with guesses
about the script's names. Standard library only: the analysis reads a script's pairing of labels with it too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

from .kinds import INPUT, LOSS, OPTIMIZER

OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS", "SparseAdam", "ASGD",
              "Rprop", "Adafactor", "Lion", "Muon"}
SCHEDULERS = {"LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR", "PolynomialLR",
              "CosineAnnealingLR", "ChainedScheduler", "SequentialLR", "ReduceLROnPlateau", "CyclicLR", "OneCycleLR",
              "CosineAnnealingWarmRestarts", "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
              "get_constant_schedule_with_warmup", "get_scheduler", "get_polynomial_decay_schedule_with_warmup"}
# schedulers meant to be stepped once an epoch (per-batch stepping decays them far too fast)
EPOCH_SCHEDULERS = {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "PolynomialLR", "MultiplicativeLR"}
CLASSIFICATION_LOSSES = {"cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss"}
BINARY_LOSSES = {"binary_cross_entropy_with_logits", "BCEWithLogitsLoss", "binary_cross_entropy", "BCELoss"}
REGRESSION_LOSSES = {"mse_loss", "MSELoss", "l1_loss", "L1Loss", "smooth_l1_loss", "SmoothL1Loss", "huber_loss", "HuberLoss"}
FUNCTIONAL_OWNERS = {"F", "torch", "nn.functional", "torch.nn.functional"}  # where softmax(x, dim) takes the tensor first
COUNT_LOSSES = {"poisson_nll_loss", "PoissonNLLLoss"}
LOSSES = CLASSIFICATION_LOSSES | BINARY_LOSSES | REGRESSION_LOSSES | COUNT_LOSSES | {"kl_div", "KLDivLoss"}


# the functional name each loss module computes (the runtime's loss observations are named by it)
FUNCTIONAL = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss",
              "CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss", "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
              "BCELoss": "binary_cross_entropy", "KLDivLoss": "kl_div",
              "PoissonNLLLoss": "poisson_nll_loss"}


def functional(loss: str) -> str:
    """``mse_loss`` for ``MSELoss`` or ``mse_loss``."""
    return FUNCTIONAL.get(loss, loss)


def self_scheduled(call: ast.Call) -> bool:
    """An optimizer that sets its own rate: Hugging Face's Adafactor with relative_step (its default) takes no lr,
    and rejects one."""
    if short(call.func) != "Adafactor":
        return False
    rel = kwarg(call, "relative_step")
    return rel is None or not (isinstance(rel.value, ast.Constant) and rel.value.value is False)


def dotted(node: ast.AST | None) -> str:
    """``torch.nn.functional.softmax`` for an attribute chain, ``x`` for a name, "" otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def short(node: ast.AST | None) -> str:
    """The last part of a called name: ``softmax`` for ``torch.softmax`` and for ``x.softmax``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def kwarg(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


@dataclass
class Optimizer:
    var: str
    ctor: str  # SGD, AdamW, ...
    call: ast.Call
    stmt: ast.stmt
    models: list[str] = field(default_factory=list)  # the X of X.parameters() in its arguments


@dataclass
class Scheduler:
    var: str
    ctor: str
    call: ast.Call
    stmt: ast.stmt


ADAPTIVE = {"Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "SparseAdam", "Adafactor"}
LOW_PRECISION = {"bfloat16", "float16", "half"}
INPLACE_INIT = {"mul_", "div_", "fill_", "zero_", "copy_", "normal_", "uniform_", "add_", "constant_", "zeros_", "ones_", "normal",
                "uniform", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "trunc_normal_",
                "eye_", "sparse_", "clamp_"}
RANDOM = {"randint", "rand", "randn", "randint_like", "rand_like", "randn_like", "choice", "integers", "random"}
MASK_KWARGS = ("key_padding_mask", "src_key_padding_mask", "attention_mask", "mask", "attn_mask", "src_mask", "tgt_mask")


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def number(node: ast.AST | None) -> float | None:
    if node is None or not _is_number(node):
        return None
    if isinstance(node, ast.UnaryOp):
        v = number(node.operand)
        return -v if v is not None and isinstance(node.op, ast.USub) else v
    return float(node.value)  # type: ignore[attr-defined]


class Script:
    """A parsed script and the facts fixes need; ``ok`` is False when it does not parse (no fix is placed)."""

    def __init__(self, source: str, path: str | None = None, focus: tuple[str, ...] = (), optimizer_types: tuple[str, ...] = ()) -> None:
        self.source = source
        self.path = path
        self.focus = focus  # the model variables of the training phase diagnosed (a student after its teacher)
        self.optimizer_types = optimizer_types  # the class of the optimizer the run recorded as the one that trains
        self.lines = source.splitlines()
        try:
            self.tree: ast.Module = ast.parse(source)
            self.ok = True
        except (SyntaxError, ValueError):
            self.tree, self.ok = ast.Module(body=[], type_ignores=[]), False
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    # -- structure -------------------------------------------------------------------
    def stmt_of(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parent[node]
        return node

    def ancestors(self, node: ast.AST) -> list[ast.AST]:
        out = []
        while node in self.parent:
            node = self.parent[node]
            out.append(node)
        return out

    def loops_around(self, node: ast.AST) -> list[ast.For | ast.While]:
        """The loops a node is in, outermost first (within its function)."""
        out: list[ast.For | ast.While] = []
        for a in self.ancestors(node):
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                break
            if isinstance(a, (ast.For, ast.While, ast.AsyncFor)):
                out.append(a)  # type: ignore[arg-type]
        return out[::-1]

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)

    def class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, ast.ClassDef)), None)

    def indent(self, stmt: ast.stmt) -> str:
        text = self.lines[stmt.lineno - 1] if 0 < stmt.lineno <= len(self.lines) else ""
        return text[: len(text) - len(text.lstrip())]

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ""

    @cached_property
    def calls(self) -> list[ast.Call]:
        return sorted((n for n in ast.walk(self.tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))

    def calls_named(self, *names: str) -> list[ast.Call]:
        return [c for c in self.calls if short(c.func) in names]

    # -- training --------------------------------------------------------------------
    @cached_property
    def optimizers(self) -> list[Optimizer]:
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
                var = dotted(target)
                ctor = short(node.value.func)
                if var and ctor in OPTIMIZERS:
                    models = [dotted(c.func.value) for c in ast.walk(node.value) if isinstance(c, ast.Call)
                              and isinstance(c.func, ast.Attribute) and c.func.attr in ("parameters", "named_parameters") and dotted(c.func.value)]
                    out.append(Optimizer(var, ctor, node.value, node, models))
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and short(node.value.func) in OPTIMIZERS:
                # ``return torch.optim.SGD(...)`` in a factory: its settings are fixed in the call; the variable is where
                # the script binds the factory's result (``optimizer = build_optimizer(model)``), and code that uses
                # the optimizer goes after that binding
                call = node.value
                models = [dotted(c.func.value) for c in ast.walk(call) if isinstance(c, ast.Call)
                          and isinstance(c.func, ast.Attribute) and c.func.attr in ("parameters", "named_parameters") and dotted(c.func.value)]
                fn = self.function_of(node)
                bound = [a for a in ast.walk(self.tree) if fn is not None and isinstance(a, ast.Assign) and len(a.targets) == 1
                         and isinstance(a.value, ast.Call) and dotted(a.value.func) == fn.name and dotted(a.targets[0])]
                for a in bound:
                    arg_models = [dotted(x) for x in a.value.args if dotted(x)]  # type: ignore[attr-defined]
                    out.append(Optimizer(dotted(a.targets[0]), short(call.func), call, a, models or arg_models))
                if not bound:
                    out.append(Optimizer("", short(call.func), call, node, []))
        return sorted(out, key=lambda o: (not o.var, o.stmt.lineno))

    @cached_property
    def schedulers(self) -> list[Scheduler]:
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
                var, ctor = dotted(node.targets[0]), short(node.value.func)
                if var and ctor in SCHEDULERS:
                    out.append(Scheduler(var, ctor, node.value, node))
        return sorted(out, key=lambda s: s.stmt.lineno)

    def unstepped_schedulers(self) -> list[Scheduler]:
        """Schedulers the script builds and never steps: the rate stays at their first factor (a warmup's 0)."""
        return [sc for sc in self.schedulers if sc.var and not self.method_calls(sc.var, "step")]

    def method_calls(self, owner: str, method: str) -> list[ast.Call]:
        return [c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == method and dotted(c.func.value) == owner]

    @cached_property
    def backward_calls(self) -> list[ast.Call]:
        return [c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "backward"
                and not c.args and all(k.arg in ("retain_graph", "create_graph", "inputs") for k in c.keywords)]

    @cached_property
    def optimizer(self) -> Optimizer | None:
        """The optimizer the training loop steps: the one whose step() is nearest a backward(), else the first."""
        opts = self.optimizers
        if not opts:
            return None
        stepped = [o for o in opts if self.step_calls(o.var)]
        focused = [o for o in stepped or opts if set(o.models) & set(self.focus)]
        recorded = [o for o in stepped or opts if o.ctor in self.optimizer_types]
        return (focused or recorded or stepped or opts)[0]

    def step_calls(self, opt: str) -> list[ast.Call]:
        """``opt.step()``, and ``scaler.step(opt)`` of a GradScaler."""
        if not opt:
            return []
        out = [c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "step" and _held(dotted(c.func.value), opt)]
        out += [c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "step" and c.args
                and _held(dotted(c.args[0]), opt)]
        return sorted(out, key=lambda c: c.lineno)

    def accumulation_loops(self) -> list[ast.For | ast.While]:
        """Loops around a ``backward()`` that do not hold the optimizer's step() of the same function: a loop over
        micro-batches, inside the training step (the step comes after it)."""
        opt = self.optimizer
        steps = self.step_calls(opt.var) if opt is not None else []
        out: list[ast.For | ast.While] = []
        for b in self.backward_calls:
            fn = self.function_of(b)
            mine = [c for c in steps if self.function_of(c) is fn]
            if mine:
                out += [lp for lp in self.loops_around(b) if not any(self.inside(c, lp) for c in mine) and lp not in out]
        return out

    @cached_property
    def model(self) -> str | None:
        """The model variable: the X of ``X.parameters()`` given to the optimizer."""
        opt = self.optimizer
        if opt is None:
            return None
        models = [m for m in opt.models if m]
        return models[0] if models else None

    @cached_property
    def training_backwards(self) -> list[ast.Call]:
        """The ``backward()`` calls, first those of the optimizer's own loop (a script that trains a teacher and then
        its student has two; the optimizer is the diagnosed phase's)."""
        opt = self.optimizer
        steps = self.step_calls(opt.var) if opt is not None else []

        def with_step(b: ast.Call) -> bool:
            fn, loops = self.function_of(b), self.loops_around(b)
            return any(self.function_of(c) is fn and (not loops or self.inside(c, loops[0])) for c in steps)

        return sorted(self.backward_calls, key=lambda b: not with_step(b))

    def _loops_of_backward(self) -> list[ast.For | ast.While]:
        """The loops around the first ``backward()`` (of the optimizer's loop): in its function, else around the calls
        of that function (a ``train_step`` method the loop calls)."""
        micro = self.accumulation_loops()
        for b in self.training_backwards:
            loops = [lp for lp in self.loops_around(b) if lp not in micro]
            if loops:
                return loops
            fn = self.function_of(b)
            if fn is not None:
                for call in self.calls_named(fn.name):
                    if self.function_of(call) is not fn and self.loops_around(call):
                        return self.loops_around(call)
        return []

    @cached_property
    def loop(self) -> ast.For | ast.While | None:
        """The training loop: the outermost loop around the first ``backward()`` (or around the call of the
        function that calls it)."""
        loops = self._loops_of_backward()
        return loops[0] if loops else None

    @cached_property
    def inner_loop(self) -> ast.For | ast.While | None:
        """The innermost such loop: the loop over batches."""
        loops = self._loops_of_backward()
        return loops[-1] if loops else None

    @cached_property
    def step_function(self) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function holding ``backward()`` when the loop is outside it (a ``train_step``), else None."""
        micro = self.accumulation_loops()
        for b in self.training_backwards:
            if [lp for lp in self.loops_around(b) if lp not in micro]:
                return None
            fn = self.function_of(b)
            if fn is not None and self.loop is not None and not self.inside(self.loop, fn):
                return fn
        return None

    def in_training(self, node: ast.AST) -> bool:
        """In the training loop, or in the step function it calls."""
        if self.loop is not None and self.inside(node, self.loop):
            return True
        fn = self.step_function
        return fn is not None and self.inside(node, fn)

    def inside(self, node: ast.AST, container: ast.AST) -> bool:
        return container in self.ancestors(node)

    def assignments_to(self, name: str) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and any(dotted(t) == name for t in node.targets):
                out.append(node)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and dotted(node.target) == name:
                out.append(node)
        return sorted(out, key=lambda s: s.lineno)

    def torch_nn(self) -> str | None:
        """How the script's top level names ``torch.nn`` (``nn``, ``torch.nn``), from its imports; None if it does not."""
        whole = None
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "torch.nn" and a.asname:
                        return a.asname
                    if a.name in ("torch", "torch.nn") and not a.asname:
                        whole = "torch.nn"
            elif isinstance(node, ast.ImportFrom) and node.module == "torch" and node.level == 0:
                for a in node.names:
                    if a.name == "nn":
                        return a.asname or "nn"
        return whole

    def loss_calls(self) -> list[ast.Call]:
        """Calls that compute a loss: ``F.cross_entropy(...)`` and calls of a variable bound to ``nn.XLoss()``."""
        criteria: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call) and short(node.value.func) in LOSSES:
                criteria[dotted(node.targets[0])] = short(node.value.func)
        out = []
        for c in self.calls:
            name = short(c.func)
            if (name in LOSSES and name[0].islower()) or dotted(c.func) in criteria:
                if len(c.args) >= 2 or (len(c.args) == 1 and c.keywords):
                    out.append(c)
        return out

    def loss_name(self, call: ast.Call) -> str:
        """The loss a loss call computes (``CrossEntropyLoss`` for a criterion variable)."""
        name = dotted(call.func)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and dotted(node.targets[0]) == name and isinstance(node.value, ast.Call):
                return short(node.value.func)
        return short(call.func)

    def criterion_ctor(self, call: ast.Call) -> ast.Call | None:
        name = dotted(call.func)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and dotted(node.targets[0]) == name and isinstance(node.value, ast.Call):
                return node.value
        return None

    def forward_methods(self) -> list[ast.FunctionDef]:
        """Every ``forward`` method of a class in the script, and plain functions that compute a model's output."""
        return [n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef) and n.name == "forward" and self.class_of(n) is not None]

    def bound_at_module(self) -> set[str]:
        names: set[str] = set()
        for node in self.tree.body:
            names |= _binds(node)
        return names

    def _loop_nodes(self) -> list[ast.AST]:
        nodes = list(ast.walk(self.loop)) if self.loop is not None else []
        return nodes + (list(ast.walk(self.step_function)) if self.step_function is not None else [])

    def model_var(self, model_class: str = "") -> str | None:
        """The model's variable: the one assigned from the class the run recorded as the root model (or from
        ``from_pretrained``), else the shortest prefix of the optimizer's ``X.parameters()`` that the training
        code calls (``model`` for an optimizer over ``model.fc.parameters()``), else that X."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
                name = short(node.value.func)
                if name and model_class and name == model_class:
                    var = dotted(node.targets[0])
                    if var:
                        return var
        x = self.model
        if x:
            parts = x.split(".")
            called = {dotted(c.func) for c in self.calls if self.in_training(c)}
            for k in range(1, len(parts) + 1):
                prefix = ".".join(parts[:k])
                if prefix != "self" and prefix in called:
                    return prefix
            return x
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
                if short(node.value.func) in ("from_pretrained", "from_config"):
                    var = dotted(node.targets[0])
                    if var:
                        return var
        return None

    def block_of(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        parent = self.parent.get(stmt)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and stmt in block:
                return block
        return None

    def lr_assignments_in_loop(self) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for n in self._loop_nodes():
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "lr":
                    out.append(n)  # type: ignore[arg-type]
        return out

    def scheduler_step_calls(self) -> list[tuple[Scheduler, ast.Call]]:
        return [(s, c) for s in self.schedulers for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "step"
                and _held(dotted(c.func.value), s.var)]

    def schedule_horizons(self) -> list[tuple[Scheduler, ast.Call, ast.AST, str]]:
        """Where a schedule stepped with the optimizer (once a step) is told its length in steps: the
        ``num_training_steps`` of a Hugging Face schedule, ``T_max`` / ``total_steps`` / ``total_iters``, or a
        ``*steps*`` / ``*iters*`` variable a ``LambdaLR``'s function reads (assigned once). (scheduler, call, the node
        holding the length or the call itself when it is not given, keyword.)"""
        out: list[tuple[Scheduler, ast.Call, ast.AST, str]] = []
        per_step = {id(sch) for sch, c in self.scheduler_step_calls() if self.in_training(c)
                    and (self.inner_loop is None or self.inside(c, self.inner_loop) or self.step_function is not None)}
        for sch in self.schedulers:
            if id(sch) not in per_step:
                continue
            call = sch.call
            if sch.ctor in ("get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
                            "get_polynomial_decay_schedule_with_warmup"):
                kw = kwarg(call, "num_training_steps")
                node = kw.value if kw is not None else call.args[2] if len(call.args) > 2 else None
                if node is not None:
                    out.append((sch, call, node, "num_training_steps"))
            elif sch.ctor in ("CosineAnnealingLR", "OneCycleLR", "PolynomialLR"):
                name = {"CosineAnnealingLR": "T_max", "OneCycleLR": "total_steps", "PolynomialLR": "total_iters"}[sch.ctor]
                kw = kwarg(call, name)
                node = kw.value if kw is not None else call.args[1] if sch.ctor == "CosineAnnealingLR" and len(call.args) > 1 else None
                if node is not None:
                    out.append((sch, call, node, name))
            elif sch.ctor == "LambdaLR":
                given = kwarg(call, "lr_lambda")
                fn_node = given.value if given is not None else call.args[1] if len(call.args) > 1 else None
                body: ast.AST | None = fn_node if isinstance(fn_node, ast.Lambda) else None
                if isinstance(fn_node, ast.Name):
                    body = next((d for d in ast.walk(self.tree) if isinstance(d, ast.FunctionDef) and d.name == fn_node.id), None)
                if body is None:
                    continue
                own = {a.arg for a in ast.walk(body) if isinstance(a, ast.arg)}
                names = {n.id for n in ast.walk(body) if isinstance(n, ast.Name) and n.id not in own}
                for name in sorted(names):
                    low = name.lower()
                    if not ("step" in low or "iter" in low) or low.startswith("warm"):
                        continue
                    assigned = [st for st in self.assignments_to(name) if isinstance(st, ast.Assign) and len(st.targets) == 1]
                    if len(assigned) == 1:
                        out.append((sch, call, assigned[0].value, name))
        return out

    def scheduler_steps_per_micro_batch(self) -> list[tuple[Scheduler, ast.Call]]:
        """Scheduler steps inside a loop over micro-batches (around backward(), not the optimizer's step()): the
        schedule advances once a micro-batch, several times per optimizer step."""
        micro = self.accumulation_loops()
        opt = self.optimizer
        steps = self.step_calls(opt.var) if opt is not None else []
        return [(s, c) for s, c in self.scheduler_step_calls()
                if any(self.inside(c, lp) for lp in micro) or self._beside_accumulated_step(c, steps)]

    def _beside_accumulated_step(self, call: ast.Call, steps: list[ast.Call]) -> bool:
        """``call`` runs at every pass of the loop whose optimizer step waits for an accumulation condition
        (``if (i + 1) % accum == 0: optimizer.step()``) that does not hold ``call``: once per micro-batch."""
        loops = self.loops_around(call)
        if not loops:
            return False
        loop = loops[-1]
        fn = self.function_of(call)
        mine = [c for c in steps if self.function_of(c) is fn and self.inside(c, loop)]
        if not mine or not any(self.inside(b, loop) for b in self.backward_calls):
            return False

        def accumulation_guards(node: ast.AST) -> list[ast.If]:
            return [a for a in self.ancestors(node) if isinstance(a, ast.If) and self.inside(a, loop)
                    and any(isinstance(d, ast.BinOp) and isinstance(d.op, ast.Mod) for d in ast.walk(a.test))]

        return all(any(not self.inside(call, g) for g in accumulation_guards(c)) for c in mine) and all(
            accumulation_guards(c) for c in mine)

    def epoch_scheduler_steps_per_batch(self) -> list[tuple[Scheduler, ast.Call]]:
        inner, outer = self.inner_loop, self.loop
        if inner is None or outer is None or inner is outer:
            return []
        return [(s, c) for s, c in self.scheduler_step_calls() if s.ctor in EPOCH_SCHEDULERS and self.inside(c, inner)]

    def lr_nodes(self) -> list[tuple[ast.Call, ast.AST | None, str]]:
        """Where the script sets the learning rate: (call, the value's node or None when absent, keyword).
        The optimizer's lr (keyword or second positional), "lr" of its param-group dicts, a cyclic scheduler's
        max_lr / base_lr, TrainingArguments' learning_rate."""
        out: list[tuple[ast.Call, ast.AST | None, str]] = []
        opt = self.optimizer
        if opt is not None and not self_scheduled(opt.call):
            k = kwarg(opt.call, "lr")
            groups = [d for a in opt.call.args for d in ast.walk(a) if isinstance(d, ast.Dict)]
            for d in groups:
                for key, value in zip(d.keys, d.values):
                    if isinstance(key, ast.Constant) and key.value == "lr":
                        out.append((opt.call, value, "lr"))
            if k is not None:
                out.append((opt.call, k.value, "lr"))
            elif len(opt.call.args) >= 2 and opt.ctor != "LBFGS":
                out.append((opt.call, opt.call.args[1], "lr"))
            elif not any(o[0] is opt.call for o in out):
                out.append((opt.call, None, "lr"))
        for s in self.schedulers:
            for name in ("max_lr",):
                k = kwarg(s.call, name)
                if k is not None:
                    out.append((s.call, k.value, name))
        for c in self.calls_named("TrainingArguments"):
            k = kwarg(c, "learning_rate")
            if k is not None:
                out.append((c, k.value, "learning_rate"))
        return out

    def l2_penalty_terms(self) -> list[ast.AST]:
        """The coefficient of an explicit weight penalty added to the loss in the loop (``lam * sum(p.pow(2) ...)``)."""
        out: list[ast.AST] = []
        for n in self._loop_nodes():
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                for coef, term in ((n.left, n.right), (n.right, n.left)):
                    text = ast.unparse(term)
                    if (_is_number(coef) or isinstance(coef, (ast.Name, ast.Attribute))) and "parameters()" in text and (
                            "pow(2)" in text or "** 2" in text or "norm(" in text or "square" in text):
                        out.append(coef)
        return out

    def zero_grad_calls_in_loop(self) -> list[ast.Call]:
        return [c for c in self.calls_named("zero_grad") if self.in_training(c)]

    def _backward_stmt(self) -> ast.stmt | None:
        inside = [b for b in self.training_backwards if self.in_training(b)]
        return self.stmt_of(inside[0]) if inside else None

    def _step_stmts(self) -> list[ast.stmt]:
        opt = self.optimizer
        return [self.stmt_of(c) for c in self.step_calls(opt.var)] if opt is not None else []

    def zero_grad_between_backward_and_step(self) -> bool:
        b = self._backward_stmt()
        if b is None:
            return False
        steps = self._step_stmts()
        for z in self.zero_grad_calls_in_loop():
            zs = self.stmt_of(z)
            if zs.lineno > b.lineno and any(s.lineno > zs.lineno and self.in_training(s) for s in steps):
                return True
        return False

    def zero_grad_outside_step_loop(self) -> bool:
        """zero_grad() only outside the loop that steps the optimizer (once an epoch): the steps in between add each
        batch's gradients to the last ones'."""
        steps = [st for st in self._step_stmts() if self.in_training(st)]
        zeros = self.zero_grad_calls_in_loop()
        if not steps or not zeros:
            return False
        around = self.loops_around(steps[0])
        return bool(around) and not any(self.inside(z, around[-1]) for z in zeros)

    def step_before_backward(self) -> ast.stmt | None:
        b = self._backward_stmt()
        if b is None:
            return None
        block = self.block_of(b) or []
        steps = [s for s in self._step_stmts() if s in block]
        if steps and all(s.lineno < b.lineno for s in steps):
            return steps[0]
        return None

    def backward_divided(self) -> bool:
        for b in self.backward_calls:
            owner = b.func.value if isinstance(b.func, ast.Attribute) else None
            if isinstance(owner, ast.BinOp) and isinstance(owner.op, ast.Div):
                return True
            if owner is not None and isinstance(owner, ast.Call) and short(owner.func) == "scale":
                owner = owner.args[0] if owner.args else owner
            name = dotted(owner)
            for stmt in self.assignments_to(name) if name else []:
                value = getattr(stmt, "value", None)
                if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Div) or isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div):
                    return True
        return False

    def _in_forward_path(self, node: ast.AST) -> bool:
        """In a forward method, or in the training loop before its backward()."""
        fn = self.function_of(node)
        if fn is not None and fn.name == "forward" and self.class_of(fn) is not None:
            return True
        if fn is not None and fn.name in self.prediction_functions:
            return True
        b = self._backward_stmt()
        return self.in_training(node) and b is not None and node.lineno <= b.lineno  # type: ignore[attr-defined]

    def detach_calls(self) -> list[ast.Call]:
        out = []
        for c in self.calls_named("detach", "detach_"):
            if not (isinstance(c.func, ast.Attribute) and self._in_forward_path(c)):
                continue
            up = self.parent.get(c)
            if isinstance(up, ast.Attribute) and up.attr in ("item", "cpu", "numpy", "tolist"):
                continue  # a value read out for logging
            out.append(c)
        return out

    def no_grad_blocks(self) -> list[ast.With]:
        out = []
        for n in ast.walk(self.tree):
            if isinstance(n, ast.With) and any(short(i.context_expr.func if isinstance(i.context_expr, ast.Call) else i.context_expr)
                                               in ("no_grad", "inference_mode") for i in n.items):
                if self._in_forward_path(n) and any(isinstance(x, ast.Call) and short(x.func) not in ("print", "append") for x in ast.walk(n)):
                    out.append(n)
        return out

    def softmax_over_batch(self) -> list[ast.expr]:
        """The ``dim=0`` of a (log_)softmax in training code: normalised over the batch's rows, not over each row's
        classes (a batch-first tensor's dim 0 is its samples)."""
        out: list[ast.expr] = []
        for c in self.calls:
            if short(c.func) not in ("softmax", "log_softmax", "Softmax", "LogSoftmax"):
                continue
            k = kwarg(c, "dim")
            # the dim's place: F.softmax(x, 0) / torch.softmax(x, 0); x.softmax(0) and nn.Softmax(0) take it first
            functional_call = isinstance(c.func, ast.Attribute) and dotted(c.func.value) in FUNCTIONAL_OWNERS
            at = 1 if functional_call else 0
            dim = k.value if k is not None else c.args[at] if len(c.args) > at else None
            if dim is not None and number(dim) == 0:
                out.append(dim)
        return out

    def no_grad_decorators(self) -> list[ast.expr]:
        """``@torch.no_grad()`` on a model's forward, or on a method of its class that the forward calls."""
        out: list[ast.expr] = []
        for cls in ast.walk(self.tree):
            if not isinstance(cls, ast.ClassDef):
                continue
            methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)]
            forward = next((f for f in methods if f.name == "forward"), None)
            called = {c.func.attr for c in ast.walk(forward) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                      and dotted(c.func.value) == "self"} if forward is not None else set()
            for f in methods:
                if f.name != "forward" and f.name not in called:
                    continue
                for d in f.decorator_list:
                    if short(d.func if isinstance(d, ast.Call) else d) in ("no_grad", "inference_mode"):
                        out.append(d)
        return out

    def freeze_statements(self) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for n in ast.walk(self.tree):
            hit = False
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in n.targets):
                hit = number(n.value) == 0 or isinstance(n.value, ast.Constant) and n.value.value is False
            elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and short(n.value.func) == "requires_grad_":
                a = n.value.args[0] if n.value.args else (kwarg(n.value, "requires_grad").value if kwarg(n.value, "requires_grad") else None)  # type: ignore[union-attr]
                hit = isinstance(a, ast.Constant) and a.value in (False, 0)
            if hit:
                stmt: ast.stmt = n  # type: ignore[assignment]
                up = self.parent.get(stmt)
                while isinstance(up, (ast.For, ast.If)) and len(up.body) == 1 and not up.orelse:
                    stmt, up = up, self.parent.get(up)
                out.append(stmt)
        return sorted(out, key=lambda s: s.lineno)

    def model_reassigned_after_optimizer(self) -> ast.stmt | None:
        opt, m = self.optimizer, self.model
        if opt is None or not m:
            return None
        fn = self.function_of(opt.stmt)
        for stmt in self.assignments_to(m) + [s for s in ast.walk(self.tree) if isinstance(s, ast.Assign) and any(
                isinstance(t, ast.Attribute) and dotted(t.value) == m for t in s.targets)]:
            if stmt.lineno > opt.stmt.lineno and self.function_of(stmt) is fn and (self.loop is None or stmt.lineno < self.loop.lineno):
                return stmt
        return None

    def eval_calls(self) -> list[ast.Call]:
        return [c for c in self.calls_named("eval") if isinstance(c.func, ast.Attribute) and not c.args]

    def model_casts(self) -> list[ast.Call]:
        """Casts to low precision: ``model.to(torch.bfloat16)``, ``Net().half()``, and those of the tensors fed to it
        (``x.to(torch.bfloat16)``): weights kept in bf16/fp16, and the inputs made to match them."""
        m = self.model

        def on_model(c: ast.Call) -> bool:
            recv = c.func.value  # type: ignore[attr-defined]
            return dotted(recv) == m or (isinstance(recv, ast.Call) and short(recv.func)[:1].isupper())

        casts = [c for c in self.calls if self._low_precision_cast(c)]
        if not any(on_model(c) for c in casts):
            return []  # tensors' casts are undone only with the model's
        return casts

    def _low_precision_cast(self, c: ast.Call) -> bool:
        if not isinstance(c.func, ast.Attribute):
            return False
        if c.func.attr in ("bfloat16", "half") and not c.args:
            return True
        return c.func.attr == "to" and any(short(a) in LOW_PRECISION for a in list(c.args) + [k.value for k in c.keywords if k.arg == "dtype"])

    def sum_reductions(self) -> list[ast.AST]:
        """``reduction="sum"`` given to a loss, and ``(...).sum()`` in the training step over an expression made of
        per-element loss calls (``criterion(out, y)`` of a ``reduction="none"`` criterion): the sums a mean replaces."""
        out: list[ast.AST] = []
        for c in self.calls:
            if short(c.func) in LOSSES:
                k = kwarg(c, "reduction")
                if k is not None and isinstance(k.value, ast.Constant) and k.value.value == "sum":
                    out.append(k.value)
            elif (isinstance(c.func, ast.Attribute) and c.func.attr == "sum" and not c.args and not c.keywords
                  and self.in_training(c) and any(self._per_element_loss(k) for k in ast.walk(c.func.value) if isinstance(k, ast.Call))):
                out.append(c)
        return out

    def _per_element_loss(self, call: ast.Call) -> bool:
        """A loss call whose terms are not reduced: ``F.mse_loss(..., reduction="none")``, or a criterion built so."""
        def unreduced(k: ast.Call) -> bool:
            r = kwarg(k, "reduction")
            return r is not None and isinstance(r.value, ast.Constant) and r.value.value == "none"

        if short(call.func) in LOSSES:
            return unreduced(call)
        if isinstance(call.func, ast.Name):
            made = [st.value for st in self.assignments_to(call.func.id) if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call)]
            return len(made) == 1 and short(made[0].func) in LOSSES and unreduced(made[0])
        return False

    def unguarded_logs(self) -> list[ast.Call]:
        out = []
        for c in self.calls_named("log", "log2", "log10"):
            if dotted(c.func).startswith("math") or not self._in_forward_path(c):
                continue
            arg = c.args[0] if c.args else c.func.value if isinstance(c.func, ast.Attribute) else None
            text = ast.unparse(arg) if arg is not None else ""
            if "clamp" in text or "+" in text or "eps" in text:
                continue
            out.append(c)
        return out

    def std_divisions(self) -> list[ast.BinOp]:
        out = []
        for n in ast.walk(self.tree):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
                right = n.right
                if isinstance(right, ast.Call) and short(right.func) in ("std", "var", "norm"):
                    out.append(n)
                elif isinstance(right, (ast.Name, ast.Attribute)) and "std" in dotted(right).lower():
                    out.append(n)
        return out

    def place_line(self, place: str) -> int | None:
        """The line (1-based) a finding of the optimizer, the loss or the input belongs on: the optimizer's
        construction (else its step), the loss computed in training (else the backward), the model's call
        on the batch in the loop."""
        if place == OPTIMIZER:
            opt = self.optimizer
            if opt is not None:
                return opt.stmt.lineno
            return None
        if place == LOSS:
            in_loop = [c for c in self.loss_calls() if self.in_training(c)] or self.loss_calls()
            first = in_loop or self.backward_calls
            return min(c.lineno for c in first) if first else None
        if place == INPUT:
            calls = self.forward_calls_in_loop()
            return min(c.lineno for c in calls) if calls else None
        return None

    def models_trained_in_loop(self) -> list[str]:
        """Variables called in the training step before ``backward()`` (outside ``no_grad``) that hold an object the
        script builds with a call (``student = make_student()``): the models whose output the loss is made of."""
        b = self._backward_stmt()
        out: list[str] = []
        for k in self.calls:
            name = dotted(k.func)
            if not isinstance(k.func, ast.Name) or name in out or not self.in_training(k) or (b is not None and k.lineno > b.lineno):
                continue
            if any(isinstance(a, ast.With) and "no_grad" in self.segment(a.items[0].context_expr) for a in self.ancestors(k)):
                continue
            built = [st.value for st in self.assignments_to(name) if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call)]
            maker = short(built[0].func) if built else ""
            if maker and maker not in LOSSES and not maker.endswith("Loss") and "loss" not in name.lower() and "criterion" not in name.lower():
                out.append(name)
        return out

    def forward_calls_in_loop(self, model_class: str = "") -> list[ast.Call]:
        m = self.model_var(model_class)
        if not m or self.loop is None:
            return []
        b = self._backward_stmt()
        return [c for c in self.calls if _held(dotted(c.func), m) and self.in_training(c) and (b is None or c.lineno <= b.lineno)
                and (c.args or c.keywords)]

    def forward_calls_elsewhere(self, model_class: str = "") -> list[ast.Call]:
        """The model's other calls than the training step's (an evaluation's ``model(x_val)``, in the loop or not)."""
        m = self.model_var(model_class)
        inside = {id(c) for c in self.forward_calls_in_loop(model_class)}
        return [c for c in self.calls if m and _held(dotted(c.func), m) and id(c) not in inside and (c.args or c.keywords)]

    @cached_property
    def prediction_functions(self) -> set[str]:
        """Plain functions the training step calls before backward() to compute the prediction (a functional model)."""
        b = self._backward_stmt()
        if b is None:
            return set()
        defined = {n.name for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        step = self.step_function.name if self.step_function is not None else None
        return {c.func.id for c in self.calls if isinstance(c.func, ast.Name) and c.func.id in defined and c.func.id != step
                and self.in_training(c) and c.lineno <= b.lineno}

    def lone_permutations(self) -> list[ast.stmt]:
        """Statements that reorder one tensor alone (``y = y[torch.randperm(n)]``, ``random.shuffle(labels)``): labels
        shuffled apart from their inputs."""
        perms = {dotted(s.targets[0]) for s in ast.walk(self.tree) if isinstance(s, ast.Assign) and len(s.targets) == 1
                 and isinstance(s.value, ast.Call) and short(s.value.func) in ("randperm", "permutation")}
        uses: dict[str, int] = {}
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Subscript) and dotted(n.slice) in perms:
                uses[dotted(n.slice)] = uses.get(dotted(n.slice), 0) + 1
        out: list[ast.stmt] = []
        for s in ast.walk(self.tree):
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.value, ast.Subscript):
                same = dotted(s.value.value) == dotted(s.targets[0]) and dotted(s.targets[0])
                idx = s.value.slice
                if same and ((isinstance(idx, ast.Call) and short(idx.func) in ("randperm", "permutation"))
                             or (dotted(idx) in perms and uses.get(dotted(idx), 0) == 1)):
                    out.append(s)
            elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and short(s.value.func) == "shuffle" and len(s.value.args) == 1:
                out.append(s)
        return out

    def attention_scores(self) -> list[tuple[ast.AST, ast.AST]]:
        """(the score expression, its q @ k^T matmul) in forward methods: ``q @ k.transpose(-2, -1) * scale``."""
        out: list[tuple[ast.AST, ast.AST]] = []
        for fn in self.forward_methods():
            for n in ast.walk(fn):
                mm: ast.AST | None = None
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                    mm = n
                elif isinstance(n, ast.Call) and short(n.func) in ("matmul", "bmm", "einsum"):
                    mm = n
                if mm is None or not any(isinstance(x, (ast.Attribute, ast.Call)) and short(x) in ("transpose", "mT", "T", "permute")
                                         or isinstance(x, ast.Call) and short(x.func) in ("transpose", "permute")
                                         or isinstance(x, ast.Constant) and isinstance(x.value, str) and "->" in x.value
                                         for x in ast.walk(mm)):
                    continue
                up = self.parent.get(mm)
                if isinstance(up, ast.BinOp) and isinstance(up.op, (ast.Mult, ast.Div)):
                    out.append((up, mm))
                else:
                    out.append((mm, mm))
        return out

    def mask_arguments(self) -> list[ast.AST]:
        """Attention masks given to calls: padding masks first (a causal attn_mask is rarely the wrong one)."""
        out: list[tuple[int, ast.AST]] = []
        for c in self.calls:
            for k in c.keywords:
                if k.arg in MASK_KWARGS and not (isinstance(k.value, ast.Constant) and k.value.value is None):
                    out.append((MASK_KWARGS.index(k.arg), k.value))
            if short(c.func) == "masked_fill" and c.args:
                out.append((len(MASK_KWARGS), c.args[0]))
        return [n for _, n in sorted(out, key=lambda x: x[0])]

    def random_writes(self) -> list[ast.stmt]:
        """``y[idx] = torch.randint(...)``: random values written into part of a tensor outside the loop."""
        # a tensor made empty and filled in place is made by its random writes: removing one leaves garbage
        filled = {dotted(st.targets[0]) for st in ast.walk(self.tree) if isinstance(st, ast.Assign) and len(st.targets) == 1
                  and isinstance(st.value, ast.Call) and short(st.value.func) in ("empty", "empty_like", "new_empty")}
        out: list[ast.stmt] = []
        for st in ast.walk(self.tree):
            if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Subscript)
                    and not self.in_training(st) and isinstance(st.value, ast.Call) and short(st.value.func) in RANDOM
                    and dotted(st.targets[0].value) not in filled):
                out.append(st)
        return out


def _held(owner: str, var: str) -> bool:
    """``owner`` is the variable ``var``, or the attribute an object keeps it in (a trainer's ``self.optimizer``)."""
    return owner == var or (bool(var) and "." not in var and owner.endswith("." + var))


def _binds(node: ast.AST) -> set[str]:
    """The names a statement binds in its scope (not inside functions or classes it defines, except their names)."""
    out: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
            out.add((a.asname or a.name).split(".")[0])
        return out
    stack: list[ast.AST] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            continue
        if isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= _binds(n)
            continue
        stack.extend(ast.iter_child_nodes(n))
    return out


def binds(node: ast.AST) -> set[str]:
    return _binds(node)
