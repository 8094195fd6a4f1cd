"""Map each module to the source line that creates it, and give it a readable name.

Three sources, best first:

1. **Creation sites** (:mod:`.creation`): under ``gradsight trace`` every module notes the
   call that built it. A module built in the user's code maps to that call's line
   (``nn.Linear(4, 8),`` inside a module-level ``nn.Sequential(...)``, the
   ``add_module`` call, the line of a factory function or of a comprehension), keyed
   by scope, callee and position (:class:`..pysource.CallSite`) so the language
   server can find it again in an edited text. The root maps to the line that
   built the model in the user's script (``model = Net()``,
   ``AutoModel.from_config(config)``), even when a library built it.
2. **Classes**: a child ``query`` of a ``BertSelfAttention`` is created by
   ``self.query = ...`` in that class (or a base class), found with ``ast`` in the
   class's source, for the user's classes and installed libraries alike (a
   library's own modules keep their library line).
3. **The caller's code**: for a model built before gradsight was watching (a
   ``watch()`` call), the variable holding it is found in the user's frame and
   its ``var = nn.Sequential(...)``, factory function or ``add_module`` calls read
   with ``ast``; children of torch containers otherwise map to their container's line.

No module maps into torch's own files: a module torch built (a clone of
``nn.TransformerEncoder``'s layer) takes its nearest mapped ancestor's line.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import sys
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from types import FrameType

from torch import nn

from ..pysource import (
    CallIndex,
    CallSite,
    ClassAssigns,
    StaticModel,
    call_index,
    class_assigns,
    display_name,
    sequential_arg_line,
    static_model,
)
from . import creation

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
# wrappers whose inner model is the user's: names under them read as the inner model's
_WRAPPER_ATTRS = frozenset({"_orig_mod", "module"})
_WRAPPER_TYPES = ("DistributedDataParallel", "DataParallel", "OptimizedModule")


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    owner: str | None  # qualified class whose code creates the module
    attr: str | None  # attribute (or container index) it is stored under
    site: str | None = None  # CallSite.key of the creating call in ``file`` (scope|callee|index), when known
    label: str | None = None  # a readable name: ``model[2]``, ``net.fc1``


@dataclass(frozen=True)
class _ClassSource:
    file: str
    found: ClassAssigns


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


_SOURCES: dict[type, _ClassSource | None] = {}


def _class_source(cls: type) -> _ClassSource | None:
    if cls not in _SOURCES:
        _SOURCES[cls] = _read_class_source(cls)
    return _SOURCES[cls]


def _read_class_source(cls: type) -> _ClassSource | None:
    try:
        file = inspect.getsourcefile(cls)
        lines, start = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    if not file:
        return None
    file = os.path.abspath(file)
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    cls_node = next((n for n in tree.body if isinstance(n, ast.ClassDef)), None)
    if cls_node is None:
        return None
    return _ClassSource(file, class_assigns(cls_node, start - 1))


def _find_in_class(cls: type, attr: str) -> SourceLoc | None:
    for klass in cls.__mro__:
        if klass is nn.Module or klass is object or issubclass(nn.Module, klass):
            break
        src = _class_source(klass)
        if src is None:
            continue
        line = src.found.line_of(attr)
        if line is not None:
            return SourceLoc(src.file, line, _qualname(klass), attr)
    return None


def _text(file: str) -> str:
    return "".join(linecache.getlines(file))


@lru_cache(maxsize=64)
def _parse_file(file: str, size: int) -> ast.Module:  # size keys the cache on edits
    return ast.parse(_text(file))


@lru_cache(maxsize=64)
def _index_file(file: str, size: int) -> CallIndex:
    return call_index(_parse_file(file, size))


def _tree(file: str) -> ast.Module | None:
    try:
        return _parse_file(file, len(_text(file)))
    except (SyntaxError, ValueError):
        return None


def _call_at(site: creation.Site) -> CallSite | None:
    text = _text(site.file)
    if not text:
        return None
    try:
        return _index_file(site.file, len(text)).at(site.line, site.col)
    except (SyntaxError, ValueError):
        return None


def _sequential_arg_line(file: str, line: int, index: int) -> int | None:
    """Line of the ``index``-th argument of an ``nn.Sequential(...)`` call starting on ``line``."""
    tree = _tree(file)
    return sequential_arg_line(tree, line, index) if tree is not None else None


def map_modules(root: nn.Module) -> dict[str, SourceLoc]:
    """Source location (and readable name) of every module of ``root`` that can be found."""
    by_name = dict(root.named_modules())
    static = _static_root(root)
    root_label = _root_label(root, static)
    inner = root
    while type(inner).__name__ in _WRAPPER_TYPES:  # DDP(nn.Sequential(...)) reads as the Sequential
        wrapped = next((getattr(inner, a) for a in sorted(_WRAPPER_ATTRS) if isinstance(getattr(inner, a, None), nn.Module)), None)
        if wrapped is None:
            break
        inner = wrapped
    container = isinstance(inner, _CONTAINERS)
    out: dict[str, SourceLoc] = {}
    for name, mod in by_name.items():
        try:
            loc = _locate(name, mod, by_name, out, static)
        except Exception:  # source may be missing or odd; mapping is best-effort
            loc = None
        if loc is None and name:
            loc = _inherit(name, out)
        if loc is not None:
            skip = frozenset(p for p in name.split(".") if p in _WRAPPER_ATTRS and _is_wrapper_part(name, p, by_name))
            out[name] = SourceLoc(loc.file, loc.line, loc.owner, loc.attr, loc.site, display_name(name, root_label, skip, container))
    return out


def _is_wrapper_part(name: str, part: str, by_name: dict[str, nn.Module]) -> bool:
    """``part`` of ``name`` is the inner-model attribute of a wrapper (DDP's ``module``, torch.compile's ``_orig_mod``)."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p == part:
            parent = by_name.get(".".join(parts[:i]))
            return parent is not None and type(parent).__name__ in _WRAPPER_TYPES
    return False


def _from_site(site: creation.Site, owner: str | None = None, attr: str | None = None) -> SourceLoc:
    call = _call_at(site)
    return SourceLoc(site.file, site.line, owner, attr, call.key if call is not None else None)


def _locate(name: str, mod: nn.Module, by_name: dict[str, nn.Module], done: dict[str, SourceLoc],
            static: _Static | None) -> SourceLoc | None:
    note = creation.created(mod)
    if not name:
        if note is not None and note.user is not None:
            return _from_site(note.user)
        if static is not None:
            return _static_loc(static, static.model.line, static.model.col)
        src = _class_source(type(mod))
        return SourceLoc(src.file, src.found.line, None, None) if src else None
    parent_name, _, attr = name.rpartition(".")
    parent = by_name.get(parent_name)
    if parent is None:
        return None
    in_class = None if isinstance(parent, _CONTAINERS) or type(parent).__module__.startswith("torch.") else _find_in_class(type(parent), attr)
    if note is not None and note.direct is not None and creation.is_user_file(note.direct.file):
        # built in the user's code: that call, whatever holds the module
        owner, oattr = (in_class.owner, in_class.attr) if in_class is not None and in_class.file == note.direct.file else (None, None)
        return _from_site(note.direct, owner, oattr)
    if in_class is not None:
        return in_class  # a library class's own line (or a class whose creation was not seen)
    if note is not None and note.direct is not None and creation.file_kind(note.direct.file) == "library":
        return _from_site(note.direct)
    if static is not None and name in static.model.children:
        return _static_loc(static, *static.model.children[name])
    container = done.get(parent_name)
    if container is None:
        return None
    line = container.line
    if isinstance(parent, nn.Sequential) and attr.isdigit() and container.site is None:
        line = _sequential_arg_line(container.file, container.line, int(attr)) or line
    return SourceLoc(container.file, line, container.owner, container.attr, container.site)


def _inherit(name: str, done: dict[str, SourceLoc]) -> SourceLoc | None:
    """A module no rule placed (torch built it): its nearest mapped ancestor's line, never torch's files."""
    parts = name.split(".")
    for i in range(len(parts) - 1, -1, -1):
        loc = done.get(".".join(parts[:i]))
        if loc is not None:
            return loc
    return None


# -- the caller's code, for a model built before gradsight was watching ------------------------------

@dataclass(frozen=True)
class _Static:
    file: str
    var: str
    model: StaticModel


def _static_loc(static: _Static, line: int, col: int) -> SourceLoc:
    call = _call_at(creation.Site(static.file, line, col, None, None))
    return SourceLoc(static.file, line, None, None, call.key if call is not None else None)


def _user_frames() -> list[FrameType]:
    out = []
    f: FrameType | None = sys._getframe(2)
    while f is not None:
        if creation.is_user_file(f.f_code.co_filename):
            out.append(f)
        f = f.f_back
    return out


def _static_root(root: nn.Module) -> _Static | None:
    """The variable holding ``root`` in the innermost user frame that has one, and what its code builds there."""
    if creation.created(root) is not None:
        return None  # the creation notes say it better
    try:
        frames = _user_frames()
    except ValueError:
        return None
    for f in frames:
        scope = _scope_of(f)
        file = os.path.abspath(f.f_code.co_filename)
        for space in (f.f_locals, f.f_globals):
            var = next((k for k, v in space.items() if v is root and not k.startswith("_")), None)
            if var is None:
                continue
            tree = _tree(file)
            if tree is None:
                return None
            found = static_model(tree, var, scope if space is f.f_locals else "")
            if found is not None:
                return _Static(file, var, found)
    return None


def _scope_of(frame: FrameType) -> str:
    qual = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return "" if qual == "<module>" else ".".join(p for p in qual.split(".") if not p.startswith("<"))


def _root_label(root: nn.Module, static: _Static | None) -> str | None:
    if static is not None:
        return static.var
    note = creation.created(root)
    if note is None or note.user is None:
        return None
    for frame_site in (note.user, *note.outer):  # the factory's own line first, then its callers'
        call = _call_at(frame_site)
        target = call.target if call is not None else None
        if target and target.isidentifier():
            return target
        if target and target.startswith("self.") and target[5:].isidentifier():
            return target[5:]
    return None
