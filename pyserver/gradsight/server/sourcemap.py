"""Module names to the lines of the text being edited.

The store records where each module was created: its file and line, the creating call
as ``scope|callee|index`` (``site``: the third ``nn.Linear(...)`` call at module level, the
first ``nn.ReLU(...)`` of ``build_mlp``), and for modules a class creates, the class and
attribute (``self.query = ...`` of ``BertSelfAttention``). Lines move as the user edits,
so the server re-finds each module with ``ast`` in the current text: by its creating call,
else by class and attribute, else inside its container; the stored line is used only
where none of these applies (a model read from the code alone, a file the parser cannot
read). Modules found through one creating call or one class attribute are *instances* of
one line (``self.query`` of twelve layers, a layer appended in a loop); modules that only
share a line (``nn.Sequential(nn.Linear(2, 3), nn.ReLU())`` written on one line) are not.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ..pysource import CallIndex, ClassAssigns, call_index, class_assigns, classes, sequential_arg_line
from ..store import ModuleInfo


@dataclass(frozen=True)
class Located:
    module: str
    line: int  # 1-based, in the current text
    group: str  # modules of one group are instances of one creating call or class attribute


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
    n_lines = text.count("\n") + 1
    found = classes(tree)
    calls: list[CallIndex] = []
    assigns: dict[int, ClassAssigns] = {}
    by_name = {m.name: m for m in modules}
    lines: dict[str, tuple[int, str] | None] = {}

    def index() -> CallIndex:
        if not calls:
            calls.append(call_index(tree))
        return calls[0]

    def line_of(m: ModuleInfo) -> tuple[int, str] | None:
        if m.name in lines:
            return lines[m.name]
        lines[m.name] = None  # guards against cycles
        parent = by_name.get(m.parent) if m.parent is not None else None
        got: tuple[int, str] | None = None
        if m.site:
            call = index().find(m.site)
            if call is not None:
                got = (call.line, f"site:{m.site}")
        if got is None and m.owner is None and parent is None:
            # the root model under watch(): its class statement
            node = found.get(m.type) or next((c for q, c in found.items() if q.endswith("." + m.type)), None)
            if node is not None:
                got = (node.lineno, "root")
        elif got is None and parent is not None and m.owner is not None and (parent.owner, parent.attr) == (m.owner, m.attr) \
                and same_file(parent.file, path):
            # inside a container: the container's line, or its argument of a literal nn.Sequential(...)
            base = line_of(parent)
            if base is not None:
                line = base[0]
                last = m.name.rpartition(".")[2]
                if last.isdigit() and m.line != parent.line:
                    line = sequential_arg_line(tree, line, int(last)) or line
                got = (line, f"{base[1]}[{last}]")
        elif got is None and m.owner is not None and m.attr:
            cls = _owner_class(m.owner, found)
            if cls is not None:
                key = id(cls)
                if key not in assigns:
                    assigns[key] = class_assigns(cls)
                attr_line = assigns[key].line_of(m.attr)
                if attr_line is not None:
                    got = (attr_line, f"attr:{m.owner}.{m.attr}")
        if got is None and m.line is not None and 0 < m.line <= n_lines and not (m.site or m.owner):
            got = (m.line, f"line:{m.name}")  # read from the code alone at run time: the stored line
        lines[m.name] = got
        return got

    out = []
    for m in mine:
        got = line_of(m)
        if got is not None:
            out.append(Located(m.name, got[0], got[1]))
    return out
