"""Fixes for a diagnosis: the library (``library/*.toml``), each fix's premises (``evidence``), where and how it
changes the script (``placers``), and the generator that offers only fixes whose evidence holds in the run and
whose target exists in the script, placed as code that parses and resolves.

A fix file entry says which kinds it answers (optionally which places: optimizer / loss / input), what it
``needs`` (premises, all must hold), which placer writes it (``place``, ``params``), its ``rank`` (how directly
it answers the mechanism: lower first), an explanation, the expected effect and validation steps.
``suggest`` ranks the fixes for the root cause first, then for the other errors.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..script import Script
from .edits import Edit, NoPlace, Patch, apply, check
from .evidence import PREMISES, Context, Target
from .placers import PLACERS, is_identifier, module_ref

if TYPE_CHECKING:
    from ..analysis.data import RunData
    from ..analysis.findings import Finding
    from ..analysis.rootcause import RootCause

LIBRARY = Path(__file__).with_name("library")
PLACES = ("optimizer", "loss", "input")

__all__ = ["Fix", "FixLibraryError", "attach", "is_identifier", "library", "module_ref", "suggest"]


@dataclass(frozen=True)
class Fix:
    id: str
    title: str
    kinds: tuple[str, ...]
    needs: tuple[str, ...]
    place: str
    rank: int
    explanation: str
    effect: str
    validation: tuple[str, ...]
    modules: tuple[str, ...] = ()  # where the target must be (optimizer / loss / input); () for anywhere
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def answers(self, kind: str, module: str) -> bool:
        return kind in self.kinds and (not self.modules or module in self.modules)


class FixLibraryError(ValueError):
    pass


@lru_cache(maxsize=1)
def library() -> tuple[Fix, ...]:
    out: list[Fix] = []
    for path in sorted(LIBRARY.glob("*.toml")):
        with open(path, "rb") as fh:
            entries = tomllib.load(fh).get("fix", [])
        for d in entries:
            try:
                fix = Fix(d["id"], d["title"], tuple(d["kinds"]), tuple(d.get("needs", [])), d["place"], int(d.get("rank", 50)),
                          d["explanation"], d.get("effect", ""), tuple(d.get("validation", [])), tuple(d.get("modules", [])),
                          dict(d.get("params", {})))
            except KeyError as exc:
                raise FixLibraryError(f"{path}: a fix without {exc}") from None
            unknown = [n for n in fix.needs if n not in PREMISES]
            if unknown:
                raise FixLibraryError(f"{path}: fix {fix.id!r} needs unknown premises {unknown}")
            if fix.place not in PLACERS:
                raise FixLibraryError(f"{path}: fix {fix.id!r} has unknown place {fix.place!r}")
            out.append(fix)
    ids = [f.id for f in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise FixLibraryError(f"fix ids used twice: {sorted(dup)}")
    return tuple(out)


def _targets(cause: RootCause | None, findings: list[Finding]) -> list[Target]:
    out: list[Target] = []
    if cause is not None:
        out.append(Target(cause.kind, cause.module, cause.evidence, cause.step))
    for f in sorted(findings, key=lambda f: -f.strength):
        if f.severity == "error" and (cause is None or (f.module, f.kind) != (cause.module, cause.kind)):
            out.append(Target(f.kind, f.module, f.evidence, f.step))
    return out


def holds(fix: Fix, c: Context) -> list[str]:
    """The premises of ``fix`` that are false for this run and script ([] when all hold)."""
    out = []
    for name in fix.needs:
        try:
            ok = PREMISES[name](c)
        except (LookupError, ValueError, TypeError, AttributeError, ArithmeticError):
            ok = False
        if not ok:
            out.append(name)
    return out


def place(fix: Fix, c: Context) -> tuple[list[Edit], str]:
    """The fix's edits for this script and what they do; NoPlace when the script has no valid place for it."""
    if not c.script.ok or not c.script.path:
        raise NoPlace("the script could not be read")
    p = Patch(c.script, c.script.path, fix.id)
    try:
        detail = PLACERS[fix.place](c, p, **fix.params)
    except (LookupError, ValueError, TypeError, AttributeError, AssertionError) as exc:
        raise NoPlace(f"{fix.place}: {exc}") from None
    edits = p.finish()
    if not edits:
        raise NoPlace("nothing to change")
    why = check(apply(c.script.source, edits), edits)
    if why:
        raise NoPlace(why)
    return edits, detail


def suggest(cause: RootCause | None, findings: list[Finding], data: RunData, script: str | None, limit: int = 5,
            source: str | None = None, verdicts: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The fixes whose premises hold and that have a valid place in the script: for the root cause first (by
    rank), then for the other errors; fixes a re-run validated come first, those it found worse last.

    ``source`` is the script's current text (an editor's buffer) when it differs from the file; ``verdicts``
    the stored validation results by fix id."""
    if not script:
        return []
    if source is None:
        try:
            source = Path(script).read_text(errors="replace")
        except OSError:
            return []
    s = Script(source, os.path.abspath(script), tuple((data.phase or {}).get("models") or ()),
               (str(data.run.get("optimizer")),) if data.run.get("optimizer") else ())
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for order, target in enumerate(_targets(cause, findings)):
        c = Context(target, data, s, findings, cause)
        for fix in sorted((f for f in library() if f.answers(target.kind, target.module)), key=lambda f: f.rank):
            if fix.id in seen or f"# gradsight fix '{fix.id}'" in source or holds(fix, c):
                continue  # (a fix already applied to this text is not offered again)
            try:
                edits, detail = place(fix, c)
            except NoPlace:
                continue
            seen.add(fix.id)
            out.append(render(fix, target, edits, detail, order))
    verdicts = verdicts or {}
    for item in out:
        v = verdicts.get(item["id"])
        # a verdict holds for the code that was re-run: a fix whose text changed since is not validated any more
        item["validated"] = v if v is not None and (v.get("details") or {}).get("digest") == item["digest"] else None
    rank = {"validated": 0, None: 1, "did_not_help": 2, "worse": 3, "failed": 4}
    out.sort(key=lambda f: (rank.get((f["validated"] or {}).get("verdict"), 1)))
    return out[:limit] if limit else out


def render(fix: Fix, target: Target, edits: list[Edit], detail: str, order: int) -> dict[str, Any]:
    first = min(edits, key=lambda e: e.start)
    return {
        "id": fix.id,
        "title": fix.title,
        "kind": target.kind,
        "module": target.module,
        "for_root_cause": order == 0,
        "explanation": fix.explanation,
        "effect": f"{detail}; expected: {fix.effect}" if fix.effect else detail,
        "validation": list(fix.validation),
        "placement": fix.place,
        "edits": [e.as_json() for e in sorted(edits, key=lambda e: e.start)],
        "where": {"file": first.file, "line": first.start},
        "snippet": "".join(e.text for e in sorted(edits, key=lambda e: e.start)),
        "digest": digest(edits),
    }


def digest(edits: list[Edit]) -> str:
    """What a fix inserts, not where (lines move when the user edits above it)."""
    import hashlib

    return hashlib.sha1("\0".join(e.text for e in sorted(edits, key=lambda e: e.start)).encode()).hexdigest()[:16]


def attach(diagnosis: dict[str, Any], data: RunData, findings: list[Finding], cause: RootCause | None, script: str | None = None,
           source: str | None = None, limit: int = 5) -> dict[str, Any]:
    """Fill a diagnosis's ``fixes`` (with any stored validation verdicts) and return it."""
    script = script or data.run.get("script")
    path = str(script) if script and os.path.isfile(str(script)) else None
    diagnosis["fixes"] = suggest(cause, findings, data, path, limit=limit, source=source, verdicts=stored_verdicts(data.path))
    return diagnosis


def stored_verdicts(store: str) -> dict[str, dict[str, Any]]:
    from .validate import read_verdicts

    return read_verdicts(store)
