"""Where a store may be written, and how a reader opens one (sqlite3 and the standard library only).

gradsight never writes over a file it did not create: an existing file that is not a
gradsight store is refused with a message saying why; an existing store gets the next
free name (``run-1.db``, ``run-2.db``, ...) unless the caller asks to overwrite it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from .schema import SCHEMA_PREFIX, StoreError

SQLITE_HEADER = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-shm", "-journal")


class OutputError(StoreError):
    """An output path gradsight must not or cannot write a store to."""


def ro_uri(path: str | os.PathLike[str]) -> str:
    """A read-only SQLite URI for ``path``: any file name works (``#``, ``?``, ``%`` are escaped) and
    nothing is created when the file is missing."""
    return Path(os.path.abspath(path)).as_uri() + "?mode=ro"


def is_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a gradsight run store (of any schema version): only such files are ever replaced."""
    try:
        with open(path, "rb") as fh:
            if fh.read(16) != SQLITE_HEADER:
                return False
        conn = sqlite3.connect(ro_uri(path), uri=True, timeout=1.0)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False
    return row is not None and isinstance(row[0], str) and row[0].startswith(SCHEMA_PREFIX)


def remove_store(path: str | os.PathLike[str]) -> None:
    """Delete a store and its side files; refuses anything that is not a gradsight store."""
    if os.path.exists(path) and not is_store(path):
        raise OutputError(f"{path}: not a gradsight run store; gradsight never deletes it")
    for suffix in ("", *SIDE_FILES):
        try:
            os.unlink(os.fspath(path) + suffix)
        except FileNotFoundError:
            pass


def _next_free(path: Path, taken: set[str]) -> Path:
    stem, ext = path.stem, path.suffix or ".db"
    k = 1
    while True:
        candidate = path.with_name(f"{stem}-{k}{ext}")
        if not candidate.exists() and str(candidate) not in taken:
            return candidate
        k += 1


def prepare_output(path: str | os.PathLike[str], *, overwrite: bool = False, protect: Iterable[str | os.PathLike[str]] = (),
                   what: str = "the run store") -> str:
    """The path a new store will be written to, checked: raises :class:`OutputError` with the reason when
    ``path`` cannot be a store (a folder, a path through a file, an unwritable place, an existing file that
    is not a gradsight store, one of ``protect`` such as the script itself). An existing store is kept and
    the next free name returned, unless ``overwrite``."""
    raw = os.fspath(path)
    if not raw or raw.endswith(os.sep):
        raise OutputError(f"{raw!r}: {what} must be a file name, not a folder")
    target = Path(os.path.abspath(os.path.expanduser(raw)))
    for p in protect:
        try:
            if os.path.exists(p) and target.exists() and os.path.samefile(p, target):
                raise OutputError(f"{raw}: that is the script being run; gradsight never writes over it: choose another --output")
        except OSError:
            pass
    for parent in target.parents:  # a path through a file
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{raw}: {parent} is a file, not a folder")
            break
    if target.is_dir():
        raise OutputError(f"{raw}: is a folder; give a file name such as {os.path.join(raw, 'run.db')}")
    if target.exists() or target.is_symlink():
        if not target.is_file():
            raise OutputError(f"{raw}: exists and is not a regular file; gradsight never writes over it")
        if not is_store(target):
            raise OutputError(f"{raw}: exists and is not a gradsight run store; gradsight never writes over it: choose another --output")
        if overwrite:
            remove_store(target)
        else:
            target = _next_free(target, set())
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{raw}: cannot create the folder {folder} ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{raw}: the folder {folder} is not writable")
    return str(target)


MARK = b"gradsight"  # every file gradsight writes (reports, pictures) carries its name in its first bytes or metadata


def check_replaceable(path: str | os.PathLike[str], what: str = "the file") -> None:
    """Raise :class:`OutputError` unless ``path`` is new, or a file gradsight wrote (a report or picture)."""
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{path}: is a folder; {what} must be a file name")
    for parent in p.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{path}: {parent} is a file, not a folder")
            break
    if not p.exists():
        return
    try:
        with open(p, "rb") as fh:
            head = fh.read(1 << 16)
            if MARK not in head:
                fh.seek(max(0, p.stat().st_size - (1 << 16)))
                head = fh.read()
    except OSError as exc:
        raise OutputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if MARK not in head:
        raise OutputError(f"{path}: exists and was not written by gradsight; gradsight never writes over it: choose another name")
