"""Where each module object is created: the call in the script that builds it, noted as it is built.

A module's class says little about where the user made it: every ``nn.Sequential``
child's class is torch's, and a model returned by a factory, grown with
``add_module`` or built in a comprehension has no ``self.x = ...`` line at all.
So while ``gradsight trace`` runs a script, ``nn.Module.__init__`` notes, for each
new module, the call being evaluated in the innermost frame outside torch,
gradsight and the module's own ``__init__`` chain (``direct``: a line of the user's
code, or of a library such as transformers), and the innermost frame in a user
file (``user``: for a Hugging Face model built by ``from_pretrained``, the
script's line). The notes are kept beside the modules, by id with a weak reference
(never hashing a module that is half built): nothing is attached to a module, so
deep-copying, pickling and ``torch.save`` are untouched.
A copied module (``copy.deepcopy``, as ``nn.TransformerEncoder`` clones its layer)
has no note of its own; the source map falls back to classes and containers for it.

Cost: one walk up the stack per module built (microseconds), nothing per step.
"""

from __future__ import annotations

import functools
import itertools
import os
import site
import sys
import sysconfig
import threading
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Site:
    """The call expression being evaluated in a frame (1-based lines, 0-based columns, as ``ast``)."""

    file: str
    line: int
    col: int | None
    end_line: int | None
    end_col: int | None


@dataclass(frozen=True)
class Created:
    direct: Site | None  # the innermost frame outside torch and gradsight (user code or a library)
    user: Site | None  # the innermost frame in a user file (the same as direct for the user's own code)
    outer: tuple[Site, ...] = ()  # the user frames around ``user``, inner to outer (a factory's caller: ``model = make_model()``)


OUTER_FRAMES = 6  # user frames kept around the creating one, for the name a factory's caller binds the model to
# id(module) -> (a weak reference to it, its note). Not a WeakKeyDictionary: that hashes the module, and a class may
# define __hash__ on state its own __init__ has not set yet (torchmetrics' Metric, which Lightning builds).
_NOTES: dict[int, tuple[weakref.ref[nn.Module], Created]] = {}


def _put(module: nn.Module, note: Created) -> None:
    key = id(module)

    def forget(_ref: weakref.ref[nn.Module]) -> None:  # the module is gone: so is its note
        _NOTES.pop(key, None)

    _NOTES[key] = (weakref.ref(module, forget), note)


def _noted(module: nn.Module) -> bool:
    got = _NOTES.get(id(module))
    return got is not None and got[0]() is module
_LOCK = threading.Lock()
_installed = 0  # nesting count of install()
_original_init: Any = None

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_GRADSIGHT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _library_dirs() -> tuple[str, ...]:
    dirs = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        dirs |= set(site.getsitepackages()) | {site.getusersitepackages()}
    except AttributeError:  # some embedded interpreters have no site module functions
        pass
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


_LIBRARY_DIRS = _library_dirs()
_kind_cache: dict[str, str] = {}


def file_kind(file: str) -> str:
    """``internal`` (torch, gradsight, frozen or generated code), ``library`` (installed packages, the standard library) or ``user``."""
    kind = _kind_cache.get(file)
    if kind is None:
        if not file or file.startswith("<"):
            kind = "internal"
        else:
            path = os.path.abspath(file)
            if path.startswith(_TORCH_DIR) or path.startswith(_GRADSIGHT_DIR):
                kind = "internal"
            elif path.startswith(_LIBRARY_DIRS) or f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path:
                kind = "library"
            else:
                kind = "user"
        _kind_cache[file] = kind
    return kind


def is_user_file(file: str | None) -> bool:
    return bool(file) and file_kind(str(file)) == "user"


@functools.lru_cache(maxsize=4096)
def _positions(code: CodeType) -> tuple[tuple[int | None, int | None, int | None, int | None], ...]:
    return tuple(code.co_positions())


@functools.lru_cache(maxsize=1024)
def _absolute(file: str) -> str:
    """A script run as ``python train.py`` has the relative name ``train.py``: stored absolute, it names one file anywhere."""
    return file if file.startswith("<") else os.path.abspath(file)


def _site(frame: FrameType) -> Site:
    code = frame.f_code
    try:
        line, end_line, col, end_col = next(itertools.islice(_positions(code), frame.f_lasti // 2, None))
    except (StopIteration, ValueError):
        line = end_line = col = end_col = None
    return Site(_absolute(code.co_filename), line or frame.f_lineno, col, end_line, end_col)


def _own_init(frame: FrameType, module: nn.Module) -> bool:
    """A frame of the module's own construction: an ``__init__`` (or ``__new__``) whose first argument is it."""
    code = frame.f_code
    if code.co_name not in ("__init__", "__new__") or not code.co_argcount:
        return False
    return frame.f_locals.get(code.co_varnames[0]) is module


def note(module: nn.Module, frame: FrameType | None) -> None:
    """Record where ``module`` is being created, walking up from ``frame``."""
    direct: Site | None = None
    user: Site | None = None
    outer: list[Site] = []
    f = frame
    while f is not None and len(outer) < OUTER_FRAMES:
        kind = file_kind(f.f_code.co_filename)
        if user is not None:
            if kind == "user":
                outer.append(_site(f))
        elif kind != "internal" and not _own_init(f, module):
            here = _site(f)
            if direct is None:
                direct = here
            if kind == "user":
                user = here
        f = f.f_back
    if direct is not None:
        _put(module, Created(direct, user, tuple(outer)))


def created(module: nn.Module) -> Created | None:
    got = _NOTES.get(id(module))
    return got[1] if got is not None and got[0]() is module else None


def install() -> None:
    """Note the creation site of every module built from now on (until the matching :func:`uninstall`)."""
    global _installed, _original_init
    with _LOCK:
        _installed += 1
        if _installed > 1:
            return
        original = nn.Module.__init__
        _original_init = original

        @functools.wraps(original)
        def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
            if not _noted(self):  # a second call of Module.__init__ on the same object keeps the first site
                try:
                    note(self, sys._getframe(1))
                except Exception:  # never let the note break the user's model
                    pass
            original(self, *args, **kwargs)

        __init__.__gradsight_creation__ = True  # type: ignore[attr-defined]
        nn.Module.__init__ = __init__  # type: ignore[method-assign]


def uninstall() -> None:
    global _installed, _original_init
    with _LOCK:
        if _installed == 0:
            return
        _installed -= 1
        if _installed == 0 and _original_init is not None:
            if getattr(nn.Module.__init__, "__gradsight_creation__", False):
                nn.Module.__init__ = _original_init  # type: ignore[method-assign]
            _original_init = None
