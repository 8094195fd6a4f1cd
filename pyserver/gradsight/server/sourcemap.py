"""Module names to the lines of the text being edited.

The store records where each module was created (file, line, and the class
and attribute that create it). Lines move as the user edits, so the server
re-finds each module by class and attribute name with ``ast`` in the current
text; the stored line is used only for a file the parser cannot read.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ..pysource import ClassAssigns, class_assigns, classes, sequential_arg_line
from ..store import ModuleInfo


@dataclass(frozen=True)
class Located:
    module: str
    line: int  # 1-based, in the current text


def same_file(stored: str | None, path: str) -> bool:
    """The store's path names this document (or, for a run from another machine, a file of the same name)."""
    if not stored:
        return False
    if os.path.realpath(stored) == os.path.realpath(path):
        return True
    return not os.path.exists(stored) and os.path.basename(stored) == os.path.basename(path)


def _owner_class(owner: str, found: dict[str, ast.ClassDef]) -> ast.ClassDef | None:
    """The class named by the qualified ``module.Class`` owner: the longest suffix that is a class of the file."""
    parts = owner.split(".")
    for i in range(len(parts)):
        node = found.get(".".join(parts[i:]))
        if node is not None:
            return node
    return None


def resolve(modules: list[ModuleInfo], path: str, text: str) -> list[Located] | None:
    """Current lines of the modules created in ``path``; None when ``text`` does not parse."""
    mine = [m for m in modules if same_file(m.file, path)]
    if not mine:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    found = classes(tree)
    assigns: dict[int, ClassAssigns] = {}
    by_name = {m.name: m for m in modules}
    lines: dict[str, int | None] = {}

    def line_of(m: ModuleInfo) -> int | None:
        if m.name in lines:
            return lines[m.name]
        lines[m.name] = None  # guards against cycles
        parent = by_name.get(m.parent) if m.parent is not None else None
        line: int | None = None
        if m.owner is None:
            # the root model: its class statement
            node = found.get(m.type) or next((c for q, c in found.items() if q.endswith("." + m.type)), None)
            line = node.lineno if node is not None else None
        elif parent is not None and (parent.owner, parent.attr) == (m.owner, m.attr) and same_file(parent.file, path):
            # inside a container: the container's line, or its argument of a literal nn.Sequential(...)
            base = line_of(parent)
            if base is not None:
                line = base
                last = m.name.rpartition(".")[2]
                if last.isdigit() and m.line != parent.line:
                    line = sequential_arg_line(tree, base, int(last)) or base
        else:
            cls = _owner_class(m.owner, found)
            if cls is not None:
                key = id(cls)
                if key not in assigns:
                    assigns[key] = class_assigns(cls)
                line = assigns[key].line_of(m.attr) if m.attr else None
        lines[m.name] = line
        return line

    return [Located(m.name, ln) for m in mine if (ln := line_of(m)) is not None]
