"""What a training script is made of, read with ``ast``: its optimizers, schedulers, training loop, loss and
forward calls, the statements that touch a model's weights. Fixes are placed with these, never with guesses
about the script's names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

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
LOSSES = CLASSIFICATION_LOSSES | BINARY_LOSSES | REGRESSION_LOSSES | {"kl_div", "KLDivLoss"}


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


class Script:
    """A parsed script and the facts fixes need; ``ok`` is False when it does not parse (no fix is placed)."""

    def __init__(self, source: str, path: str | None = None) -> None:
        self.source = source
        self.path = path
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
        return sorted(out, key=lambda o: o.stmt.lineno)

    @cached_property
    def schedulers(self) -> list[Scheduler]:
        out = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
                var, ctor = dotted(node.targets[0]), short(node.value.func)
                if var and ctor in SCHEDULERS:
                    out.append(Scheduler(var, ctor, node.value, node))
        return sorted(out, key=lambda s: s.stmt.lineno)

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
        return (stepped or opts)[0]

    def step_calls(self, opt: str) -> list[ast.Call]:
        """``opt.step()``, and ``scaler.step(opt)`` of a GradScaler."""
        out = self.method_calls(opt, "step")
        out += [c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "step" and c.args and dotted(c.args[0]) == opt]
        return sorted(out, key=lambda c: c.lineno)

    @cached_property
    def model(self) -> str | None:
        """The model variable: the X of ``X.parameters()`` given to the optimizer."""
        opt = self.optimizer
        if opt is None:
            return None
        models = [m for m in opt.models if m]
        return models[0] if models else None

    @cached_property
    def loop(self) -> ast.For | ast.While | None:
        """The training loop: the outermost loop around the first ``backward()`` (in its function)."""
        for b in self.backward_calls:
            loops = self.loops_around(b)
            if loops:
                return loops[0]
        return None

    @cached_property
    def inner_loop(self) -> ast.For | ast.While | None:
        """The innermost loop around the first ``backward()``: the loop over batches."""
        for b in self.backward_calls:
            loops = self.loops_around(b)
            if loops:
                return loops[-1]
        return None

    def forward_calls(self) -> list[ast.Call]:
        """Calls of the model inside the training loop (``model(x)``, ``self.model(x)``)."""
        m = self.model
        loop = self.loop
        if m is None or loop is None:
            return []
        return [c for c in self.calls if dotted(c.func) == m and self.inside(c, loop)]

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
