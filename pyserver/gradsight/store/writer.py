"""Append to a run store in batches from a background thread.

The training thread only puts plain rows on a queue; a daemon thread commits
them every ``flush_interval`` seconds. A crash of the writer (disk full, say)
is reported once and the run goes on without the store: training never fails
because of it. Each commit is durable against the process being killed.
"""

from __future__ import annotations

import io
import json
import os
import queue
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .paths import OutputError
from .rows import ModuleRow, ParamRow, StepRow, insert_sql, values
from .schema import create

_STOP = object()


def encode_array(values: np.ndarray) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def encode_npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


_STEP_SQL = insert_sql("steps", StepRow)
_MODULE_SQL = insert_sql("modules", ModuleRow)
_PARAM_SQL = insert_sql("params", ParamRow)


class StoreWriter:
    """Owns one store file. Every ``put_*`` is cheap and thread-safe.

    ``path`` must be new (see :func:`~gradsight.store.paths.prepare_output`): the writer never
    replaces a file; it adds its tables to an empty one."""

    def __init__(self, path: str | os.PathLike[str], run: dict[str, Any], *, flush_interval: float = 0.2) -> None:
        self.path = Path(path)
        if self.path.exists() and (not self.path.is_file() or self.path.stat().st_size > 0):
            raise OutputError(f"{self.path}: exists; a run store is only ever written to a new file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path)
            try:
                create(conn)
                cols = ", ".join(run)
                marks = ", ".join("?" for _ in run)
                conn.execute(f"INSERT OR REPLACE INTO run (id, {cols}) VALUES (1, {marks})", [_plain(v) for v in run.values()])
                conn.commit()
            finally:
                conn.close()
        except (sqlite3.Error, OSError) as exc:
            raise OutputError(f"{self.path}: a run store cannot be written there ({exc})") from None
        self.flush_interval = flush_interval
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._failed: str | None = None
        self._watches: list[tuple[Any, ...]] = []
        self._watch_version = 0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gradsight-store-writer", daemon=True)
        # debuggers (pydevd/debugpy) neither trace nor pause it: steps keep reaching the store while paused
        self._thread.pydev_do_not_trace = True  # type: ignore[attr-defined]
        self._thread.is_pydev_daemon_thread = True  # type: ignore[attr-defined]
        self._thread.start()

    # -- producers ---------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any]) -> None:
        if self._failed is None:
            self._queue.put((sql, tuple(params)))

    def put_step(self, row: StepRow) -> None:
        self.execute(_STEP_SQL, values(row))

    def put_module(self, row: ModuleRow) -> None:
        self.execute(_MODULE_SQL, values(row))

    def put_param(self, row: ParamRow) -> None:
        self.execute(_PARAM_SQL, values(row))

    def set_param_state(self, param_id: int, trainable: int, in_optimizer: int, got_grad: int) -> None:
        self.execute("UPDATE params SET trainable = ?, in_optimizer = ?, got_grad = ? WHERE id = ?",
                     (trainable, in_optimizer, got_grad, param_id))

    def set_forward_order(self, module_ids: list[int]) -> None:
        """Module ids in the order the forward pass first calls them."""
        for rank, mid in enumerate(module_ids):
            self.execute("UPDATE modules SET forward_order = ? WHERE id = ?", (rank, mid))

    def put_metric(self, step: int, kind: str, values: np.ndarray, part: int = 0) -> None:
        """Values over one watched model's modules (or parameters): ``part`` is its place in ``run.models``."""
        self.execute("INSERT OR REPLACE INTO metrics (step, kind, data, part) VALUES (?, ?, ?, ?)", (step, kind, encode_array(values), part))

    def put_model_step(self, step: int, part: int, *, time: float, loss: float | None, lr: float | None, grad_norm: float | None,
                       grad_max: float | None, n_backward: int, skipped: bool) -> None:
        self.execute("INSERT OR REPLACE INTO model_steps VALUES (?,?,?,?,?,?,?,?,?)",
                     (step, part, time, loss, lr, grad_norm, grad_max, n_backward, int(skipped)))

    def rename_modules(self, renames: dict[str, str], params: dict[str, str]) -> None:
        """Module (and parameter) names change when a run gains a second model: every row that names them follows."""
        for old, new in renames.items():
            for sql in ("UPDATE modules SET name = ? WHERE name = ?", "UPDATE events SET module = ? WHERE module = ?",
                        "UPDATE tensors SET module = ? WHERE module = ?", "UPDATE modules SET parent = ? WHERE parent = ?"):
                self.execute(sql, (new, old))
        for old, new in params.items():
            self.execute("UPDATE params SET name = ? WHERE name = ?", (new, old))

    def put_event(self, step: int | None, kind: str, name: str, *, module: str | None = None, condition: str | None = None,
                  value: float | None = None, message: str = "", data: dict[str, Any] | None = None) -> None:
        self.execute(
            "INSERT INTO events (step, time, kind, name, module, condition, value, message, data) VALUES (?,?,?,?,?,?,?,?,?)",
            (step, time.time(), kind, name, module, condition, _plain(value), message, json.dumps(data or {}, default=str)),
        )

    def put_tensor(self, step: int, module: str, role: str, array: np.ndarray) -> None:
        self.execute(
            "INSERT INTO tensors (step, module, role, dtype, shape, nbytes, npy) VALUES (?,?,?,?,?,?,?)",
            (step, module, role, str(array.dtype), json.dumps(list(array.shape)), int(array.nbytes), encode_npy(array)),
        )

    def update_run(self, **fields: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        self.execute(f"UPDATE run SET {sets} WHERE id = 1", [_plain(v) for v in fields.values()])

    @property
    def watches(self) -> tuple[int, list[tuple[Any, ...]]]:
        """(version, rows of enabled watches) as last polled by the writer thread."""
        return self._watch_version, self._watches

    def flush(self, timeout: float = 10.0) -> None:
        """Block until everything put so far is committed."""
        done = threading.Event()
        self._queue.put(done)
        self._wake.set()
        done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._wake.set()
            self._thread.join(timeout)

    # -- the writer thread --------------------------------------------------
    def _loop(self) -> None:
        conn = sqlite3.connect(self.path, check_same_thread=False)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        last_poll = 0.0
        stop = False
        while not stop:
            # one commit per interval, not per row: the training thread's puts never wake us
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            rows: list[tuple[str, tuple[Any, ...]]] = []
            waiters: list[threading.Event] = []
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    waiters.append(item)
                else:
                    rows.append(item)
            if rows and self._failed is None:
                self._commit(conn, rows)
            now = time.monotonic()
            if now - last_poll > 0.5 or stop:
                last_poll = now
                self._poll_watches(conn)
            for w in waiters:
                w.set()
        try:  # a finished store is one self-contained file (no -wal/-shm beside it), ready to copy
            conn.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.Error:
            pass  # a reader still has it open: it stays in WAL mode, which is fine
        conn.close()

    def _commit(self, conn: sqlite3.Connection, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        try:
            with conn:
                i = 0
                while i < len(rows):  # group consecutive rows of the same statement
                    sql = rows[i][0]
                    j = i
                    while j < len(rows) and rows[j][0] == sql:
                        j += 1
                    conn.executemany(sql, [r[1] for r in rows[i:j]])
                    i = j
        except sqlite3.Error as exc:
            self._failed = str(exc)
            print(f"gradsight: the run store {self.path} can no longer be written ({exc}); "
                  "training goes on without recording", file=sys.stderr)

    def _poll_watches(self, conn: sqlite3.Connection) -> None:
        try:
            rows = conn.execute("SELECT id, condition, module, file, line FROM watches WHERE enabled = 1 ORDER BY id").fetchall()
        except sqlite3.Error:
            return
        if rows != self._watches:
            self._watches = rows
            self._watch_version += 1


def _plain(v: Any) -> Any:
    """SQLite-friendly value: numpy scalars to Python, containers to JSON, NaN kept."""
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, (list, dict, tuple)):
        return json.dumps(v, default=str)
    return v
