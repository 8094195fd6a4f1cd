"""Map each module to the source line that creates it.

A child ``query`` of a ``BertSelfAttention`` is created by ``self.query = ...``
somewhere in that class (or a base class); we find that statement with
``ast`` in the class's source, so it works for the user's classes and for
installed libraries alike. Children of torch containers (``Sequential``,
``ModuleList``, ``ModuleDict``) map to the line that builds the container, or
for a literal ``nn.Sequential(a, b, c)`` to the line of that argument.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from functools import lru_cache

from torch import nn

from ..pysource import ClassAssigns, class_assigns, sequential_arg_line

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    owner: str | None  # qualified class whose code creates the module
    attr: str | None  # attribute (or container index) it is stored under


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


def _sequential_arg_line(file: str, line: int, index: int) -> int | None:
    """Line of the ``index``-th argument of an ``nn.Sequential(...)`` call starting on ``line``."""
    text = "".join(linecache.getlines(file))
    try:
        tree = _parse_file(file, len(text))
    except SyntaxError:
        return None
    return sequential_arg_line(tree, line, index)


@lru_cache(maxsize=64)
def _parse_file(file: str, size: int) -> ast.Module:  # size keys the cache on edits
    return ast.parse("".join(linecache.getlines(file)))


def map_modules(root: nn.Module) -> dict[str, SourceLoc]:
    """Source location of every module of ``root`` that can be found."""
    out: dict[str, SourceLoc] = {}
    by_name = dict(root.named_modules())
    for name, mod in by_name.items():
        try:
            loc = _locate(name, mod, by_name, out)
        except Exception:  # source may be missing or odd; mapping is best-effort
            loc = None
        if loc is not None:
            out[name] = loc
    return out


def _locate(name: str, mod: nn.Module, by_name: dict[str, nn.Module], done: dict[str, SourceLoc]) -> SourceLoc | None:
    if not name:
        src = _class_source(type(mod))
        return SourceLoc(src.file, src.found.line, None, None) if src else None
    parent_name, _, attr = name.rpartition(".")
    parent = by_name.get(parent_name)
    if parent is None:
        return None
    if isinstance(parent, _CONTAINERS) or type(parent).__module__.startswith("torch."):
        container = done.get(parent_name)
        if container is None:
            return None
        line = container.line
        if isinstance(parent, nn.Sequential) and attr.isdigit():
            line = _sequential_arg_line(container.file, container.line, int(attr)) or line
        return SourceLoc(container.file, line, container.owner, container.attr)
    return _find_in_class(type(parent), attr)
