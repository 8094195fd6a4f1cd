"""The condition language: parse with a whitelist over Python's ``ast``, never ``eval``.

A condition is an expression over metric names (``loss``, ``grad_norm`` ...),
numbers, arithmetic, comparisons, ``and``/``or``/``not``, a layer scope
(``layer("encoder.0").grad_norm``, glob patterns allowed) and window functions
(``mean(loss, 10)``, ``max(grad_norm, 5)``, ``min(...)``), plus ``abs(x)``.

Evaluation is three-valued: a metric that has no value at this step (activation
statistics outside a sampled step, say) is unknown, and an unknown condition
does not fire.
"""

from __future__ import annotations

import ast
import fnmatch
import math
from dataclasses import dataclass
from typing import Protocol, Union

# Metrics a layer has (scoped by ``layer(...)`` or by the line of a watch).
LAYER_METRICS = frozenset(
    {
        "grad_norm",
        "grad_max",
        "grad_mean",
        "grad_zero_frac",
        "weight_norm",
        "update_ratio",
        "act_max",
        "act_min",
        "act_mean",
        "act_std",
        "dead_frac",
        "sat_frac",
        "nan_count",
    }
)
# Metrics of the whole step; a layer scope does not apply to them.
STEP_METRICS = frozenset({"loss", "step", "lr"})
METRICS = LAYER_METRICS | STEP_METRICS
WINDOW_FUNCTIONS = frozenset({"mean", "max", "min"})
MAX_WINDOW = 10_000
MAX_LENGTH = 2_000
MAX_DEPTH = 32  # operators nested deeper than this are refused (a chain of 990 unary minuses, say)


class ConditionError(ValueError):
    """A condition that cannot be parsed; ``column`` is 1-based."""

    def __init__(self, message: str, expression: str, column: int) -> None:
        self.message = message
        self.expression = expression
        self.column = max(1, column)
        super().__init__(self.render())

    def render(self) -> str:
        caret = " " * (self.column - 1) + "^"
        return f"column {self.column}: {self.message}\n  {self.expression}\n  {caret}"


class Context(Protocol):
    """What a condition reads: current values and recent history of metrics."""

    def value(self, metric: str, module: str | None) -> float | None: ...

    def history(self, metric: str, module: str | None, n: int) -> list[float]: ...


Maybe = Union[float, bool, None]


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Metric:
    name: str
    layer: str | None  # exact name, glob pattern, or None (the scope)


@dataclass(frozen=True)
class Window:
    func: str
    metric: Metric
    n: int


@dataclass(frozen=True)
class Unary:
    op: str  # "-", "+", "not", "abs"
    operand: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Compare:
    left: Node
    ops: tuple[str, ...]
    rights: tuple[Node, ...]


@dataclass(frozen=True)
class BoolOp:
    op: str  # "and" | "or"
    values: tuple[Node, ...]


Node = Union[Num, Metric, Window, Unary, Binary, Compare, BoolOp]

_BIN_OPS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.Mod: "%",
    ast.Pow: "**",
}
_CMP_OPS: dict[type, str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_CONSTANT_NAMES = {"inf": math.inf, "nan": math.nan}


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, node: ast.AST | None, message: str) -> ConditionError:
        col = getattr(node, "col_offset", 0) + 1 if node is not None else 1
        return ConditionError(message, self.text, col)

    def after(self, left: ast.expr, message: str) -> ConditionError:
        """An error at the operator that follows ``left``."""
        col = left.end_col_offset or 0
        while col < len(self.text) and self.text[col] in " )":
            col += 1
        return ConditionError(message, self.text, col + 1)

    def node(self, n: ast.AST) -> Node:
        if isinstance(n, ast.Constant):
            if isinstance(n.value, bool):
                return Num(1.0 if n.value else 0.0)
            if isinstance(n.value, (int, float)):
                try:
                    value = float(n.value)
                except OverflowError:
                    value = math.inf
                if math.isinf(value):
                    raise self.fail(n, "number beyond the float range (about 1.8e308); write inf for infinity")
                return Num(value)
            raise self.fail(n, f"expected a number, got {n.value!r}")
        if isinstance(n, ast.Name):
            if n.id in METRICS:
                return Metric(n.id, None)
            if n.id in _CONSTANT_NAMES:
                return Num(_CONSTANT_NAMES[n.id])
            raise self.fail(n, f"unknown name {n.id!r}; expected a metric ({', '.join(sorted(METRICS))})")
        if isinstance(n, ast.Attribute):
            return self.layer_metric(n)
        if isinstance(n, ast.Call):
            return self.call(n)
        if isinstance(n, ast.UnaryOp):
            ops = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not"}
            op = ops.get(type(n.op))
            if op is None:
                raise self.fail(n, "unsupported operator; use -, +, not")
            return Unary(op, self.node(n.operand))
        if isinstance(n, ast.BinOp):
            op = _BIN_OPS.get(type(n.op))
            if op is None:
                raise self.after(n.left, "unsupported operator; use + - * / % **")
            return Binary(op, self.node(n.left), self.node(n.right))
        if isinstance(n, ast.Compare):
            cmp_ops = []
            for k, op_node in enumerate(n.ops):
                cmp = _CMP_OPS.get(type(op_node))
                if cmp is None:
                    raise self.after(n.left if k == 0 else n.comparators[k - 1], "unsupported comparison; use < <= > >= == !=")
                cmp_ops.append(cmp)
            return Compare(self.node(n.left), tuple(cmp_ops), tuple(self.node(c) for c in n.comparators))
        if isinstance(n, ast.BoolOp):
            return BoolOp("and" if isinstance(n.op, ast.And) else "or", tuple(self.node(v) for v in n.values))
        raise self.fail(n, f"unsupported syntax ({type(n).__name__}); expected metrics, numbers, arithmetic, comparisons")

    def layer_metric(self, n: ast.Attribute) -> Metric:
        call = n.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "layer"):
            raise self.fail(n, 'attributes are only allowed on layer("name"), as in layer("fc1").grad_norm')
        if n.attr not in LAYER_METRICS:
            col = n.end_col_offset - len(n.attr) if n.end_col_offset is not None else n.col_offset
            raise ConditionError(
                f"unknown layer metric {n.attr!r}; expected one of {', '.join(sorted(LAYER_METRICS))}",
                self.text,
                col + 1,
            )
        if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[0].value, str):
            raise self.fail(call, 'layer() takes one quoted module name, as in layer("encoder.0")')
        name = call.args[0].value
        if not name:
            raise self.fail(call.args[0], "layer() needs a non-empty module name")
        return Metric(n.attr, name)

    def call(self, n: ast.Call) -> Node:
        if not isinstance(n.func, ast.Name):
            raise self.fail(n, "only mean(), max(), min(), abs() and layer(...).metric may be called")
        fname = n.func.id
        if n.keywords:
            raise self.fail(n.keywords[0].value, f"{fname}() takes no keyword arguments")
        if fname == "abs":
            if len(n.args) != 1:
                raise self.fail(n, "abs() takes one argument")
            return Unary("abs", self.node(n.args[0]))
        if fname in WINDOW_FUNCTIONS:
            if len(n.args) != 2:
                raise self.fail(n, f"{fname}() takes a metric and a window length, as in {fname}(loss, 10)")
            metric = self.node(n.args[0])
            if not isinstance(metric, Metric):
                raise self.fail(n.args[0], f"the first argument of {fname}() must be a metric")
            size = n.args[1]
            if not (isinstance(size, ast.Constant) and isinstance(size.value, int) and not isinstance(size.value, bool)):
                raise self.fail(size, f"the window length of {fname}() must be a whole number")
            if not 1 <= size.value <= MAX_WINDOW:
                raise self.fail(size, f"the window length must be between 1 and {MAX_WINDOW}")
            return Window(fname, metric, size.value)
        if fname == "layer":
            raise self.fail(n, 'layer("name") must be followed by a metric, as in layer("fc1").grad_norm')
        raise self.fail(n, f"unknown function {fname!r}; expected mean, max, min, abs or layer")


@dataclass(frozen=True)
class Condition:
    """A parsed condition. ``evaluate`` runs it over a :class:`Context`."""

    text: str
    root: Node

    @property
    def metrics(self) -> frozenset[str]:
        return frozenset(m.name for m in _walk_metrics(self.root))

    @property
    def windows(self) -> tuple[int, ...]:
        """The lengths of its window functions (``mean(loss, 10)`` -> 10): how much history it reads."""
        return tuple(w.n for w in _walk_windows(self.root))

    @property
    def layers(self) -> frozenset[str]:
        return frozenset(m.layer for m in _walk_metrics(self.root) if m.layer is not None)

    @property
    def glob(self) -> str | None:
        globs = [layer for layer in self.layers if _is_glob(layer)]
        return globs[0] if globs else None

    @property
    def uses_layer_metrics(self) -> bool:
        return any(m.name in LAYER_METRICS for m in _walk_metrics(self.root))

    def evaluate(self, ctx: Context, scope: str | None = None, binding: str | None = None) -> bool:
        """True when the condition holds. ``scope`` is the module of unscoped layer
        metrics (None: the whole model); ``binding`` the match of a glob in layer()."""
        return _truth(_eval(self.root, ctx, scope, binding))

    def matches(self, ctx: Context, modules: list[str], scope: str | None = None) -> list[str | None]:
        """The bindings (modules, or None for no glob) under which the condition holds."""
        glob = self.glob
        if glob is None:
            return [None] if self.evaluate(ctx, scope) else []
        return [m for m in modules if fnmatch.fnmatchcase(m, glob) and self.evaluate(ctx, scope, m)]


def parse(text: str) -> Condition:
    """Parse a condition; raises :class:`ConditionError` naming the column on bad input."""
    if not isinstance(text, str):
        raise ConditionError("a condition must be a string", repr(text), 1)
    stripped = text.strip()
    if not stripped:
        raise ConditionError("empty condition; expected something like grad_norm > 50", text, 1)
    if len(stripped) > MAX_LENGTH:
        raise ConditionError(f"condition longer than {MAX_LENGTH} characters", stripped[:60] + "...", 1)
    try:
        tree = ast.parse(stripped, mode="eval")
    except (RecursionError, MemoryError):
        raise ConditionError(f"the condition is nested too deeply (at most {MAX_DEPTH} levels)", stripped, 1) from None
    except SyntaxError as exc:
        msg = (exc.msg or "invalid syntax").replace("invalid syntax. ", "")
        if not exc.offset:  # the parser ran off the end
            col, msg = len(stripped) + 1, "the condition ends too early; expected a value here"
        else:
            col = exc.offset
        raise ConditionError(f"syntax error: {msg}", stripped, col) from None
    deep = _too_deep(tree.body)
    if deep is not None:
        raise ConditionError(f"the condition is nested too deeply (at most {MAX_DEPTH} levels)", stripped, getattr(deep, "col_offset", 0) + 1)
    parser = _Parser(stripped)
    root = parser.node(tree.body)
    globs = {m.layer for m in _walk_metrics(root) if m.layer is not None and _is_glob(m.layer)}
    if len(globs) > 1:
        raise ConditionError("at most one glob pattern may be used in layer() per condition", stripped, 1)
    return Condition(stripped, root)


def _too_deep(tree: ast.AST) -> ast.AST | None:
    """The first node nested deeper than MAX_DEPTH, without recursion (the tree itself may be deep)."""
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return node
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)))
    return None


def _walk_metrics(node: Node) -> list[Metric]:
    if isinstance(node, Metric):
        return [node]
    if isinstance(node, Window):
        return [node.metric]
    if isinstance(node, Unary):
        return _walk_metrics(node.operand)
    if isinstance(node, Binary):
        return _walk_metrics(node.left) + _walk_metrics(node.right)
    if isinstance(node, Compare):
        out = _walk_metrics(node.left)
        for r in node.rights:
            out += _walk_metrics(r)
        return out
    if isinstance(node, BoolOp):
        return [m for v in node.values for m in _walk_metrics(v)]
    return []


def _walk_windows(node: Node) -> list[Window]:
    if isinstance(node, Window):
        return [node]
    if isinstance(node, Unary):
        return _walk_windows(node.operand)
    if isinstance(node, Binary):
        return _walk_windows(node.left) + _walk_windows(node.right)
    if isinstance(node, Compare):
        return [w for n in (node.left, *node.rights) for w in _walk_windows(n)]
    if isinstance(node, BoolOp):
        return [w for v in node.values for w in _walk_windows(v)]
    return []


def _module_of(metric: Metric, scope: str | None, binding: str | None) -> str | None:
    if metric.name in STEP_METRICS:
        return None
    if metric.layer is None:
        return scope
    if _is_glob(metric.layer):
        return binding
    return metric.layer


def _truth(v: Maybe) -> bool:
    if v is None:
        return False
    if isinstance(v, float) and math.isnan(v):
        return False
    return bool(v)


def _eval(node: Node, ctx: Context, scope: str | None, binding: str | None) -> Maybe:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Metric):
        return ctx.value(node.name, _module_of(node, scope, binding))
    if isinstance(node, Window):
        values = ctx.history(node.metric.name, _module_of(node.metric, scope, binding), node.n)
        values = [float(v) for v in values if v is not None and not math.isnan(v)]
        if not values:
            return None
        if node.func == "mean":
            return sum(values) / len(values)
        return max(values) if node.func == "max" else min(values)
    if isinstance(node, Unary):
        v = _eval(node.operand, ctx, scope, binding)
        if node.op == "not":
            return None if v is None else not _truth(v)
        if v is None:
            return None
        f = float(v)
        return -f if node.op == "-" else abs(f) if node.op == "abs" else f
    if isinstance(node, Binary):
        a = _eval(node.left, ctx, scope, binding)
        b = _eval(node.right, ctx, scope, binding)
        if a is None or b is None:
            return None
        return _arith(node.op, float(a), float(b))
    if isinstance(node, Compare):
        left = _eval(node.left, ctx, scope, binding)
        result: Maybe = True
        for op, right_node in zip(node.ops, node.rights):
            right = _eval(right_node, ctx, scope, binding)
            if left is None or right is None:
                result = None if result is not False else False
            elif not _compare(op, float(left), float(right)):
                return False
            left = right
        return result
    if isinstance(node, BoolOp):
        results = [_eval(v, ctx, scope, binding) for v in node.values]
        if node.op == "and":
            if any(v is not None and not _truth(v) for v in results):
                return False
            return None if any(v is None for v in results) else True
        if any(_truth(v) for v in results):
            return True
        return None if any(v is None for v in results) else False
    raise TypeError(f"unknown node {node!r}")


def _arith(op: str, a: float, b: float) -> float:
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b if b != 0 else (math.inf if a > 0 else -math.inf if a < 0 else math.nan)
        if op == "%":
            return a % b if b != 0 else math.nan
        return float(a**b) if not (a < 0 and not float(b).is_integer()) else math.nan
    except OverflowError:
        return math.inf


def _compare(op: str, a: float, b: float) -> bool:
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    if op == "==":
        return a == b
    return a != b
