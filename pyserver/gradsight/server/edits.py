"""Fixes from the library as text insertions into the user's files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..fixes import suggest
from .runs import RunView


@dataclass(frozen=True)
class Insertion:
    fix_id: str
    title: str
    file: str
    line: int  # 1-based: the text goes before this line
    text: str
    validation: tuple[str, ...]


def fixes_for(view: RunView, script_text: str | None, module_lines: dict[str, tuple[str, int]]) -> list[dict[str, Any]]:
    """The diagnosis's fixes, placed in the current text of the script and of the layers' files."""
    if view.data is None:
        return []
    script = view.data.run.get("script")
    script = script if script and os.path.isfile(str(script)) else None
    return suggest(view.cause, view.findings, view.data, script, source=script_text, module_lines=module_lines)


def insertion(fix: dict[str, Any], lines: list[str] | None = None) -> Insertion | None:
    """The text a fix inserts (its validation steps as a comment, then its snippet), or None when it has no place.

    ``lines`` is the target file's current text: a snippet written flush left takes the indentation of
    the statement it follows (a layer's line in ``__init__``)."""
    where = fix.get("where")
    if not where or not where.get("file") or not where.get("line"):
        return None
    snippet = fix["snippet"].rstrip("\n")
    line = int(where["line"])
    if lines and snippet and not snippet[0].isspace() and fix.get("placement") == "layer_init" and 2 <= line <= len(lines) + 1:
        above = lines[line - 2]
        pad = above[: len(above) - len(above.lstrip())]
        snippet = "\n".join(pad + ln if ln else ln for ln in snippet.splitlines())
    first = snippet.splitlines()[0] if snippet else ""
    indent = first[: len(first) - len(first.lstrip())]
    steps = [" ".join(str(v).split()) for v in fix.get("validation", []) if v]  # (one comment line: no line breaks)
    fix_id = " ".join(str(fix["id"]).split())
    comment = f"{indent}# gradsight fix '{fix_id}'" + (": validate: " + "; ".join(steps) if steps else "")
    return Insertion(fix["id"], fix["title"], str(where["file"]), line, f"{comment}\n{snippet}\n",
                     tuple(steps))
