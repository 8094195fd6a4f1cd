"""Where a module is created in Python source, read with ``ast`` (stdlib only).

Shared by the runtime (which maps live modules to lines) and the language
server (which re-finds those lines in the text being edited).
"""

from __future__ import annotations

import ast
import re
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
