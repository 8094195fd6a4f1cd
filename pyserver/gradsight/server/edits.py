"""Fixes from the library as line edits of the user's files, ordered by what a re-run said of them (no LSP here).

A fix (``gradsight.fixes.suggest``) carries ``edits``: ``{"file", "start", "end", "text"}``, each replacing lines
``start`` .. ``end - 1`` (1-based, ``start == end`` inserts before ``start``) by ``text``, and ``where``, the line its
first edit lands at. A fix of the older shape (only ``snippet`` / ``where`` / ``placement``) becomes one insertion.
Its ``validated`` (``{"verdict", "summary", "effect"}`` from ``gradsight validate``) orders the fixes: validated
first, then those not validated yet, then those that did not help; those that made the run worse or fail are hidden.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..fixes import suggest
from .runs import RunView

VALIDATED, DID_NOT_HELP, WORSE, FAILED = "validated", "did_not_help", "worse", "failed"
VERDICTS = (VALIDATED, DID_NOT_HELP, WORSE, FAILED)
HIDDEN = frozenset({WORSE, FAILED})  # never offered: a re-run showed the fix harms
_RANK = {VALIDATED: 0, None: 1, DID_NOT_HELP: 2, WORSE: 3, FAILED: 3}
SUFFIX = {VALIDATED: " (validated)", DID_NOT_HELP: " (did not help)", WORSE: " (made it worse)", FAILED: " (the re-run failed)"}


@dataclass(frozen=True)
class Change:
    """Replace lines ``start`` .. ``end - 1`` (1-based) of ``file`` by ``text``; ``start == end`` inserts before ``start``."""

    file: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Placed:
    """A fix with its place in the code: what the light bulb, the CodeLens and applyFix use."""

    fix_id: str
    title: str
    changes: tuple[Change, ...]
    file: str  # where the fix's target is (its first edit)
    line: int  # 1-based
    validation: tuple[str, ...]
    verdict: str | None = None
    summary: str | None = None
    effect: str | None = None
    applied: bool = False  # its marker comment (``# gradsight fix 'id'``) is in the file already: not offered again

    @property
    def label(self) -> str:
        """The title with what validation said: ``Clip the gradients (validated)``."""
        return self.title + SUFFIX.get(self.verdict or "", "")

    @property
    def hidden(self) -> bool:
        return self.verdict in HIDDEN or self.applied

    @property
    def lines(self) -> set[tuple[str, int]]:
        """The (file, 1-based line) places the fix is offered on: its target line, each line it replaces and each line
        it inserts before."""
        out = {(self.file, self.line)}
        for c in self.changes:
            out |= {(c.file, n) for n in range(c.start, max(c.end, c.start + 1))}
        return out


def fixes_for(view: RunView, script_text: str | None, module_lines: dict[str, tuple[str, int]],
              verdicts: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The diagnosis's fixes, placed in the current text of the script (the editor's buffer) and of the layers' files,
    best first, with the verdicts ``gradsight validate`` stored in the run (``suggest`` keeps a verdict only for the
    code that was re-run). ``verdicts``, those a validation of this session answered, stand in only for fixes the
    store says nothing of."""
    if view.data is None:
        return []
    script = view.data.run.get("script")
    script = script if script and os.path.isfile(str(script)) else None
    accepts = _parameters()
    extra: dict[str, Any] = {}
    stored = stored_verdicts(view.path)
    if "module_lines" in accepts:
        extra["module_lines"] = module_lines
    if "verdicts" in accepts:
        extra["verdicts"] = {**(verdicts or {}), **stored}
    fixes = suggest(view.cause, view.findings, view.data, script, source=script_text, **extra)
    return with_verdicts(fixes, {k: v for k, v in (verdicts or {}).items() if k not in stored})


@functools.cache
def _parameters() -> frozenset[str]:
    return frozenset(inspect.signature(suggest).parameters)


def stored_verdicts(store: str) -> dict[str, dict[str, Any]]:
    """The verdicts ``gradsight validate`` stored in the run (none when the store has none, or cannot say)."""
    try:
        from .. import fixes

        read = getattr(fixes, "stored_verdicts", None)
        found = read(store) if read is not None else {}
    except Exception:  # an older store, a store being written: no verdicts yet
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, dict)} if isinstance(found, dict) else {}


def verdict_of(fix: dict[str, Any]) -> dict[str, Any] | None:
    v = fix.get("validated")
    return v if isinstance(v, dict) and v.get("verdict") in VERDICTS else None


def with_verdicts(fixes: list[dict[str, Any]], known: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The fixes, best first by verdict (a stable sort: the library's order within a verdict). ``known`` holds the
    verdicts of a validation this session ran, for fixes whose own ``validated`` (from the run store) is empty."""
    out = []
    for f in fixes:
        v = verdict_of(f)
        if v is None and known and isinstance(f.get("id"), str) and f["id"] in known:
            f = {**f, "validated": known[f["id"]]}
        out.append(f)
    return sorted(out, key=lambda f: _RANK[(verdict_of(f) or {}).get("verdict")])


def place(fix: dict[str, Any], lines_of: Callable[[str], list[str]]) -> Placed | None:
    """A fix's changes, or None when it has no valid place. ``lines_of(file)`` is a file's current text (the
    editor's buffer when it is open), which the older shape needs to indent its snippet."""
    if not isinstance(fix.get("id"), str) or not isinstance(fix.get("title"), str):
        return None
    raw = fix.get("edits")
    changes: list[Change] = []
    if isinstance(raw, list) and raw:
        for e in raw:
            c = _change(e)
            if c is None:
                return None  # a fix is applied whole or not at all
            changes.append(c)
        if _overlap(changes):
            return None
    else:
        legacy = _legacy(fix, lines_of)
        if legacy is None:
            return None
        changes.append(legacy)
    raw_where = fix.get("where")
    where: dict[str, Any] = raw_where if isinstance(raw_where, dict) else {}
    file = where.get("file") if isinstance(where.get("file"), str) and where.get("file") else changes[0].file
    w_line = where.get("line")
    line = w_line if isinstance(w_line, int) and not isinstance(w_line, bool) and w_line > 0 else changes[0].start
    v = verdict_of(fix) or {}
    steps = tuple(" ".join(str(s).split()) for s in fix.get("validation") or () if s)
    return Placed(fix["id"], fix["title"], tuple(changes), str(file), int(line), steps, v.get("verdict"),
                  _text(v.get("summary")), _text(v.get("effect")), applied(fix["id"], changes, lines_of))


def marker(fix_id: str) -> str:
    return f"# gradsight fix '{' '.join(fix_id.split())}'"


def applied(fix_id: str, changes: list[Change], lines_of: Callable[[str], list[str]]) -> bool:
    """Whether the fix is in the code already: a file it writes its marker comment into holds that comment."""
    mark = marker(fix_id)
    files = {c.file for c in changes if mark in c.text}
    return any(any(mark in ln for ln in lines_of(f)) for f in files)


def _text(x: Any) -> str | None:
    return x if isinstance(x, str) and x.strip() else None


def _change(e: Any) -> Change | None:
    if not isinstance(e, dict):
        return None
    file, start, end, text = e.get("file"), e.get("start"), e.get("end"), e.get("text")
    if not (isinstance(file, str) and file and isinstance(text, str)):
        return None
    if isinstance(start, bool) or isinstance(end, bool) or not isinstance(start, int) or not isinstance(end, int):
        return None
    if start < 1 or end < start:
        return None
    return Change(file, start, end, text)


def _overlap(changes: list[Change]) -> bool:
    by_file: dict[str, list[Change]] = {}
    for c in changes:
        by_file.setdefault(os.path.normcase(os.path.abspath(c.file)), []).append(c)
    for cs in by_file.values():
        cs.sort(key=lambda c: (c.start, c.end))
        for a, b in zip(cs, cs[1:]):
            if b.start < a.end:  # (insertions at one place keep their order, as LSP's edits do)
                return True
    return False


def _legacy(fix: dict[str, Any], lines_of: Callable[[str], list[str]]) -> Change | None:
    """A fix of the older shape (``snippet`` before ``where.line``): its validation steps as a comment, then the snippet;
    a snippet written flush left takes the indentation of the statement it follows (a layer's line in ``__init__``)."""
    where = fix.get("where")
    if not isinstance(where, dict) or not where.get("file") or not where.get("line") or not isinstance(fix.get("snippet"), str):
        return None
    file, line = str(where["file"]), int(where["line"])
    snippet = fix["snippet"].rstrip("\n")
    if snippet and not snippet[0].isspace() and fix.get("placement") == "layer_init":
        lines = [ln.rstrip("\r\n") for ln in lines_of(file)]
        if 2 <= line <= len(lines) + 1:
            above = lines[line - 2]
            pad = above[: len(above) - len(above.lstrip())]
            snippet = "\n".join(pad + ln if ln else ln for ln in snippet.splitlines())
    first = snippet.splitlines()[0] if snippet else ""
    indent = first[: len(first) - len(first.lstrip())]
    steps = [" ".join(str(v).split()) for v in fix.get("validation", []) if v]  # (one comment line: no line breaks)
    comment = f"{indent}{marker(str(fix['id']))}" + (": validate: " + "; ".join(steps) if steps else "")
    return Change(file, line, line, f"{comment}\n{snippet}\n")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def line_range(change: Change, lines: list[str]) -> tuple[tuple[int, int], tuple[int, int], str]:
    """A change as an LSP range (0-based (line, UTF-16 character) start and end) and its new text, in the file's
    current ``lines`` (with their line ends). A change at or past the end of a file whose last line has no line end
    starts at the end of that line, with a line end first."""
    n = len(lines)
    open_end = bool(lines) and not lines[-1].endswith(("\n", "\r"))
    text = change.text

    def pos(line: int) -> tuple[int, int]:  # 1-based line -> the start of that line, or the end of the text
        if line - 1 < n:
            return line - 1, 0
        if open_end:
            return n - 1, utf16_len(lines[-1])
        return n, 0

    start, end = pos(change.start), pos(change.end)
    if open_end and change.start - 1 >= n and text and not text.startswith(("\n", "\r")):
        text = "\n" + text
    return start, end, text

