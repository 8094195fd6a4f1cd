"""Where a module is created in Python source, read with ``ast`` (stdlib only).

Shared by the runtime (which maps live modules to lines) and the language
server (which re-finds those lines in the text being edited).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClassAssigns:
    line: int  # of the ``class`` statement
    assigns: dict[str, int]  # attribute -> line of the statement creating it
    patterns: tuple[tuple[re.Pattern[str], int], ...] = field(default=())  # f-string names -> line

    def line_of(self, attr: str) -> int | None:
        line = self.assigns.get(attr)
        if line is None:
            line = next((ln for pat, ln in self.patterns if pat.match(attr)), None)
        return line


def class_assigns(cls: ast.ClassDef, offset: int = 0) -> ClassAssigns:
    """``self.x = ...``, ``add_module("x", ...)``, ``setattr(self, "x", ...)`` in a class body."""
    assigns: dict[str, int] = {}
    patterns: list[tuple[re.Pattern[str], int]] = []
    for node in ast.walk(cls):
        if not isinstance(node, (ast.stmt, ast.expr)):
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self":
                    assigns.setdefault(el.attr, node.lineno + offset)
        if isinstance(node, ast.Call):
            fname = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id if isinstance(node.func, ast.Name) else ""
            if fname in ("add_module", "register_module") and node.args:
                key = node.args[0]
            elif fname == "setattr" and len(node.args) >= 2:
                key = node.args[1]
            else:
                continue
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                assigns.setdefault(key.value, node.lineno + offset)
            elif isinstance(key, ast.JoinedStr):
                regex = "".join(re.escape(str(v.value)) if isinstance(v, ast.Constant) else ".+" for v in key.values)
                patterns.append((re.compile(f"^{regex}$"), node.lineno + offset))
    return ClassAssigns(cls.lineno + offset, assigns, tuple(patterns))


def classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    """Every class of a module by its qualified name within the file (``Outer.Inner``)."""
    out: dict[str, ast.ClassDef] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = f"{prefix}{node.name}"
                out.setdefault(name, node)
                visit(node.body, f"{name}.")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, f"{prefix}{node.name}.<locals>.")
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body, prefix)

    visit(tree.body, "")
    return out


def sequential_arg_line(tree: ast.AST, line: int, index: int) -> int | None:
    """Line of the ``index``-th argument of an ``nn.Sequential(...)`` call spanning ``line``."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno)
                and (getattr(node.func, "attr", None) == "Sequential" or getattr(node.func, "id", None) == "Sequential")):
            if any(isinstance(a, ast.Starred) for a in node.args[: index + 1]):
                return None
            if index < len(node.args):
                return node.args[index].lineno
    return None


# -- call sites: where a module object is created, in a form that survives edits ---------------------

CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")


@dataclass(frozen=True)
class CallSite:
    """One call expression of a file, named so that it can be found again in an edited text.

    ``scope`` is the dotted path of the classes and functions around it (``""`` at module level,
    ``Net.__init__``, ``make_model``); ``callee`` the called expression as written (``nn.Linear``);
    ``index`` its place among the calls of that callee in that scope, in source order."""

    scope: str
    callee: str
    index: int
    line: int
    col: int
    end_line: int
    target: str | None  # what the statement holding the call assigns to (``model`` of ``model = nn.Sequential(...)``)

    @property
    def key(self) -> str:
        return f"{self.scope}|{self.callee}|{self.index}"


@dataclass
class CallIndex:
    """Every call of a parsed file, by position and by (scope, callee)."""

    by_position: dict[tuple[int, int], CallSite]
    by_callee: dict[tuple[str, str], list[CallSite]]

    def at(self, line: int, col: int | None) -> CallSite | None:
        """The call starting at ``line``/``col`` (a frame's current call, as ``co_positions`` gives it)."""
        if col is not None:
            hit = self.by_position.get((line, col))
            if hit is not None:
                return hit
        starting = [s for (ln, _), s in self.by_position.items() if ln == line]
        if len(starting) == 1 or (col is None and starting):
            return min(starting, key=lambda s: s.col)  # no column known: the outermost call of the line
        return None

    def find(self, key: str) -> CallSite | None:
        scope, callee, index = parse_key(key)
        calls = self.by_callee.get((scope, callee), [])
        return calls[index] if 0 <= index < len(calls) else None


def parse_key(key: str) -> tuple[str, str, int]:
    scope, callee, index = key.rsplit("|", 2) if key.count("|") >= 2 else ("", key, "0")
    try:
        return scope, callee, int(index)
    except ValueError:
        return scope, callee, -1


def call_index(tree: ast.AST) -> CallIndex:
    by_position: dict[tuple[int, int], CallSite] = {}
    found: list[tuple[str, str, ast.Call, str | None]] = []

    def target_of(stmt: ast.stmt | None) -> str | None:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            return ast.unparse(stmt.targets[0])
        if isinstance(stmt, ast.AnnAssign):
            return ast.unparse(stmt.target)
        return None

    def step(child: ast.AST, scope: str, stmt: ast.stmt | None) -> None:
        if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            # decorators, bases and defaults run in the enclosing scope; the body in the new one
            outer: list[ast.expr] = list(child.decorator_list)
            if isinstance(child, ast.ClassDef):
                outer += list(child.bases) + [k.value for k in child.keywords]
            else:
                outer += [d for d in child.args.defaults + child.args.kw_defaults if d is not None]
            for e in outer:
                step(e, scope, child)
            inner = f"{scope}.{child.name}" if scope else child.name
            for sub in child.body:
                step(sub, inner, sub)
            return
        if isinstance(child, ast.stmt):
            stmt = child
        elif isinstance(child, ast.Call):
            found.append((scope, ast.unparse(child.func), child, target_of(stmt)))
        for grandchild in ast.iter_child_nodes(child):
            step(grandchild, scope, stmt)

    for top in getattr(tree, "body", []):
        step(top, "", None)
    found.sort(key=lambda f: (f[2].lineno, f[2].col_offset))
    by_callee: dict[tuple[str, str], list[CallSite]] = {}
    for scope, callee, call, target in found:
        same = by_callee.setdefault((scope, callee), [])
        site = CallSite(scope, callee, len(same), call.lineno, call.col_offset, call.end_lineno or call.lineno, target)
        same.append(site)
        by_position[(call.lineno, call.col_offset)] = site
    return CallIndex(by_position, by_callee)


def _is_container_call(node: ast.AST, kind: str | None = None) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
    return name in CONTAINERS if kind is None else name == kind


Resolver = Callable[[ast.expr], "StaticModel | None"]


def container_children(call: ast.Call, prefix: str = "", follow: Resolver | None = None) -> dict[str, tuple[int, int]]:
    """Where the children of a literal container call are created: ``nn.Sequential(a, b)`` -> {"0": .., "1": ..},
    ``nn.Sequential(OrderedDict([("fc", a), ...]))`` -> {"fc": ..}, ``nn.ModuleList([a, b])``, ``nn.ModuleDict({"k": a})``;
    nested containers give dotted names (``"2.0"``). Values are (line, column) of the expression that creates each child;
    ``follow`` says what a child expression builds (a variable's own binding, a factory's return) when it can."""
    out: dict[str, tuple[int, int]] = {}

    def put(name: str, value: ast.expr) -> None:
        inner = follow(value) if follow is not None else None
        if inner is not None:
            out[prefix + name] = (inner.line, inner.col)
            out.update({f"{prefix}{name}.{k}": v for k, v in inner.children.items()})
            return
        out[prefix + name] = (value.lineno, value.col_offset)
        if isinstance(value, ast.Call) and _is_container_call(value):
            out.update(container_children(value, prefix + name + ".", follow))

    def items(node: ast.expr) -> list[tuple[str, ast.expr]] | None:
        """Key/value pairs of an OrderedDict([...]) / dict literal / dict(...) argument."""
        if isinstance(node, ast.Dict):
            return [(k.value, v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if isinstance(node, ast.Call) and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in ("OrderedDict", "dict"):
            if node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
                pairs = []
                for el in node.args[0].elts:
                    if isinstance(el, ast.Tuple) and len(el.elts) == 2 and isinstance(el.elts[0], ast.Constant) and isinstance(el.elts[0].value, str):
                        pairs.append((el.elts[0].value, el.elts[1]))
                return pairs
            if node.args and isinstance(node.args[0], ast.Dict):
                return items(node.args[0])
            return [(kw.arg, kw.value) for kw in node.keywords if kw.arg]
        return None

    if _is_container_call(call, "Sequential"):
        if len(call.args) == 1 and (pairs := items(call.args[0])) is not None:
            for k, v in pairs:
                put(k, v)
            return out
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                break
            put(str(i), arg)
    elif _is_container_call(call, "ModuleList") and call.args and isinstance(call.args[0], (ast.List, ast.Tuple)):
        for i, el in enumerate(call.args[0].elts):
            if isinstance(el, ast.Starred):
                break
            put(str(i), el)
    elif _is_container_call(call, "ModuleDict") and call.args and (pairs := items(call.args[0])) is not None:
        for k, v in pairs:
            put(k, v)
    return out


def _scope_body(tree: ast.Module, scope: str) -> list[ast.stmt] | None:
    body: list[ast.stmt] = tree.body
    for part in [p for p in scope.split(".") if p]:
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return body


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a scope, into if/for/while/with/try blocks but not into nested functions or classes."""
    out: list[ast.stmt] = []
    for s in body:
        out.append(s)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            sub = getattr(s, field_name, None)
            if isinstance(sub, list):
                out += _statements([x for x in sub if isinstance(x, ast.stmt)] +
                                   [y for h in sub if isinstance(h, ast.ExceptHandler) for y in h.body])
    return out


@dataclass(frozen=True)
class StaticModel:
    """Where a model held by a variable was built, read from the code alone (for ``watch()`` on a model built before it)."""

    line: int  # of the expression that creates it (a factory's ``return nn.Sequential(...)``, or the binding's value)
    col: int
    children: dict[str, tuple[int, int]]  # module name -> (line, column) of the expression that creates it


_MOVES = ("to", "cuda", "cpu", "double", "float", "half", "train", "eval", "requires_grad_")
MAX_DEPTH = 10  # steps of following variables and factories from one another


def _expr_model(tree: ast.Module, expr: ast.expr, scope: str, depth: int) -> StaticModel | None:
    """What an expression builds: a literal container, a factory of this file followed to its ``return``, a variable."""
    if depth > MAX_DEPTH:
        return None
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _MOVES:
        expr = expr.func.value  # model = nn.Sequential(...).to(device)
    follow: Resolver = lambda e: _expr_model(tree, e, scope, depth + 1)
    if isinstance(expr, ast.Name):
        return static_model(tree, expr.id, scope, depth + 1)
    if not isinstance(expr, ast.Call):
        return None
    if _is_container_call(expr):
        return StaticModel(expr.lineno, expr.col_offset, container_children(expr, follow=follow))
    if isinstance(expr.func, ast.Name):
        fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == expr.func.id), None)
        if fn is not None:
            ret = next((s for s in reversed(_statements(fn.body)) if isinstance(s, ast.Return) and s.value is not None), None)
            if ret is not None and ret.value is not None:
                return _expr_model(tree, ret.value, fn.name, depth + 1)
    return StaticModel(expr.lineno, expr.col_offset, {})  # a class of its own (Net()): its children come from the class


def static_model(tree: ast.Module, var: str, scope: str = "", depth: int = 0) -> StaticModel | None:
    """The last ``var = ...`` of ``scope`` (or of the module) and the children its code creates: a literal container,
    a factory function of the same file (followed to its ``return``), ``var.add_module("k", ...)``,
    ``var.register_module``, ``setattr(var, "k", ...)`` and ``var.k = ...``."""
    body = _scope_body(tree, scope)
    if body is None or depth > MAX_DEPTH:
        return None
    stmts = _statements(body)
    if scope and not any(isinstance(s, ast.Assign) and any(ast.unparse(t) == var for t in s.targets) for s in stmts):
        return static_model(tree, var, "", depth + 1)  # a module-level model used inside a function
    binding: StaticModel | None = None
    children: dict[str, tuple[int, int]] = {}
    follow: Resolver = lambda e: _expr_model(tree, e, scope, depth + 1)

    def add(key: ast.expr, value: ast.expr) -> None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            inner = follow(value)
            children[key.value] = (inner.line, inner.col) if inner is not None else (value.lineno, value.col_offset)
            if inner is not None:
                children.update({f"{key.value}.{k}": v for k, v in inner.children.items()})

    for s in stmts:
        if isinstance(s, ast.Assign) and any(ast.unparse(t) == var for t in s.targets):
            binding = _expr_model(tree, s.value, scope, depth + 1) or StaticModel(s.lineno, s.value.col_offset, {})
            children = dict(binding.children)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            call = s.value
            fn = call.func
            if isinstance(fn, ast.Attribute) and ast.unparse(fn.value) == var and fn.attr in ("add_module", "register_module") and len(call.args) >= 2:
                add(call.args[0], call.args[1])
            elif isinstance(fn, ast.Name) and fn.id == "setattr" and len(call.args) >= 3 and ast.unparse(call.args[0]) == var:
                add(call.args[1], call.args[2])
        elif isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute) and ast.unparse(s.targets[0].value) == var:
            add(ast.Constant(s.targets[0].attr), s.value)
    return StaticModel(binding.line, binding.col, children) if binding is not None else None


def display_name(name: str, root: str | None, skip: frozenset[str] = frozenset(), container: bool = False) -> str:
    """A readable name: for a root that is a container (``model = nn.Sequential(...)``), a Python-looking path from the
    variable holding it (``model[2]``, ``model[0].hidden``, ``model['head-1']``); for any other root the module's own
    name (``fc1``, ``blocks.0.query``), as conditions and the command line write it. Components in ``skip`` (a wrapper's
    ``module`` or ``_orig_mod``) are left out; the root itself reads as its variable."""
    parts = [p for p in name.split(".") if p and p not in skip] if name else []
    if not parts:
        return root or "(model)"
    if not container:
        return ".".join(parts)
    out = root or "model"
    for part in parts:
        if part.isdigit():
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out
