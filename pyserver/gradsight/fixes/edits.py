"""A fix as line edits of a file, built from a script's ``ast`` nodes, applied to a text, and checked:
the patched script must parse and every name the new code uses must be bound where it stands.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from dataclasses import dataclass

from ..script import Script, binds


class NoPlace(Exception):
    """The script has no valid place for the fix (its premise holds in the run, not in this code)."""


@dataclass(frozen=True)
class Edit:
    """Replace lines ``start`` .. ``end - 1`` (1-based) by ``text``; ``start == end`` inserts before ``start``."""

    file: str
    start: int
    end: int
    text: str

    def as_json(self) -> dict[str, object]:
        return {"file": self.file, "start": self.start, "end": self.end, "text": self.text}


def _col(line: str, byte_offset: int) -> int:
    """ast's column offsets count UTF-8 bytes; a str index counts characters."""
    return len(line.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


class Patch:
    """Edits of one script, made from its nodes."""

    def __init__(self, script: Script, file: str, tag: str) -> None:
        self.s = script
        self.file = file
        self.tag = tag  # the fix's id, in a comment above what it inserts
        self.edits: list[Edit] = []
        self._nodes: list[tuple[ast.AST, str]] = []

    def _block(self, indent: str, code: str, note: str = "") -> str:
        body = textwrap.dedent(code).strip("\n").splitlines()
        note = " ".join(note.split())  # one comment line, whatever the note holds
        head = [f"# gradsight fix '{self.tag}'" + (f": {note}" if note else "")]
        return "".join(indent + ln + "\n" if ln else "\n" for ln in head + body)

    def insert_after(self, stmt: ast.stmt, code: str, note: str = "", indent: str | None = None) -> None:
        end = (stmt.end_lineno or stmt.lineno) + 1
        self.edits.append(Edit(self.file, end, end, self._block(self.s.indent(stmt) if indent is None else indent, code, note)))

    def insert_before(self, stmt: ast.stmt, code: str, note: str = "") -> None:
        self.edits.append(Edit(self.file, stmt.lineno, stmt.lineno, self._block(self.s.indent(stmt), code, note)))

    def insert_at_body_start(self, owner: ast.For | ast.While | ast.FunctionDef, code: str, note: str = "") -> None:
        first = owner.body[0]
        self.insert_before(first, code, note)

    def replace_node(self, node: ast.AST, text: str) -> None:
        """Replace an expression's source by ``text`` (the rest of its lines is kept); several replacements
        on the same lines are merged into one edit by :meth:`finish`."""
        self._nodes.append((node, text))

    def pending(self) -> bool:
        return bool(self.edits or self._nodes)

    def finish(self) -> list[Edit]:
        """The patch's edits: line edits, and node replacements merged per run of lines they touch."""
        lines = self.s.lines
        spans = sorted(((n.lineno, n.end_lineno or n.lineno, n.col_offset, n.end_col_offset or 0, t)  # type: ignore[attr-defined]
                        for n, t in self._nodes), key=lambda x: (x[0], x[2]))
        groups: list[list[tuple[int, int, int, int, str]]] = []
        for sp in spans:
            if groups and sp[0] <= max(g[1] for g in groups[-1]):
                groups[-1].append(sp)
            else:
                groups.append([sp])
        out = list(self.edits)
        for g in groups:
            first, last = g[0][0], max(x[1] for x in g)
            starts = [0]
            for ln in lines[first - 1: last - 1]:
                starts.append(starts[-1] + len(ln) + 1)
            text = "\n".join(lines[first - 1: last])

            prev_end = -1
            cuts = []
            for a, b, ca, cb, t in g:
                lo = starts[a - first] + _col(lines[a - 1], ca)
                hi = starts[b - first] + _col(lines[b - 1], cb)
                if lo < prev_end:
                    raise NoPlace(f"two changes overlap at line {a}")
                prev_end = hi
                cuts.append((lo, hi, t))
            for lo, hi, t in reversed(cuts):
                text = text[:lo] + t + text[hi:]
            pad = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
            out.append(Edit(self.file, first, last + 1, f"{pad}# gradsight fix '{self.tag}'\n{text}\n"))
        return out

    def replace_stmt(self, stmt: ast.stmt, code: str, note: str = "") -> None:
        self.edits.append(Edit(self.file, stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1, self._block(self.s.indent(stmt), code, note)))

    def delete_stmt(self, stmt: ast.stmt, note: str) -> None:
        """Remove a statement (a comment says what was there; ``pass`` where the block would be empty)."""
        block = self._siblings(stmt)
        rest = "pass" if block is not None and len(block) == 1 else ""
        was = " ".join(self.s.segment(stmt).split())
        self.replace_stmt(stmt, rest, f"{note} (removed: {was})")

    def delete_stmts(self, stmts: list[ast.stmt], note: str) -> None:
        """Remove several statements; a block left with none keeps a ``pass``."""
        chosen = {id(st) for st in stmts}
        for st in stmts:
            block = self._siblings(st) or [st]
            last_of_block = all(id(b) in chosen for b in block) and st is block[-1]
            was = " ".join(self.s.segment(st).split())
            self.replace_stmt(st, "pass" if last_of_block else "", f"{note} (removed: {was})")

    def _siblings(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        parent = self.s.parent.get(stmt)
        for name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and stmt in block:
                return block
        return None


def apply(source: str, edits: list[Edit]) -> str:
    """The text with the edits made (they must not overlap; made from the bottom up)."""
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    ordered = sorted(edits, key=lambda e: (e.start, e.end), reverse=True)
    for a, b in zip(ordered[1:], ordered):
        if a.end > b.start:
            raise NoPlace(f"two edits overlap at line {b.start}")
    for e in ordered:
        lines[e.start - 1: e.end - 1] = e.text.splitlines(keepends=True)
    return "".join(lines)


def regions(edits: list[Edit]) -> list[tuple[int, int]]:
    """The 1-based line ranges (inclusive) the edits' new text occupies in the patched file."""
    out = []
    shift = 0
    for e in sorted(edits, key=lambda e: e.start):
        n = len(e.text.splitlines())
        start = e.start + shift
        if n:
            out.append((start, start + n - 1))
        shift += n - (e.end - e.start)
    return out


BUILTINS = set(dir(builtins)) | {"__file__", "__name__"}


def check(patched: str, edits: list[Edit]) -> str | None:
    """Why the patched script is not valid code (None when it is): it must parse, and each name the new
    lines use must be bound in their scope (at module level: bound above them)."""
    try:
        tree = ast.parse(patched)
    except SyntaxError as exc:
        return f"the patched script does not parse (line {exc.lineno}: {exc.msg})"
    spans = regions(edits)
    parent: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    module_first: dict[str, int] = {}
    for stmt in tree.body:
        for name in binds(stmt):
            module_first.setdefault(name, stmt.lineno)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        if not any(a <= node.lineno <= b for a, b in spans):
            continue
        if not _bound(node, parent, module_first):
            return f"line {node.lineno} uses {node.id!r}, which is not defined there"
    return None


def _bound(node: ast.Name, parent: dict[ast.AST, ast.AST], module_first: dict[str, int]) -> bool:
    name = node.id
    if name in BUILTINS:
        return True
    in_function = False
    cur: ast.AST = node
    while cur in parent:
        cur = parent[cur]
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
            a = cur.args
            params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs} | {p.arg for p in (a.vararg, a.kwarg) if p}
            if name in params:
                return True
            if not isinstance(cur, ast.Lambda) and any(name in binds(s) for s in cur.body):
                return True
        elif isinstance(cur, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if any(name in binds(g.target) for g in cur.generators):
                return True
    first = module_first.get(name)
    if first is None:
        return False
    return in_function or first < node.lineno
