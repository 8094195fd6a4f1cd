"""Read a run store, also while it is being written."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .paths import SQLITE_HEADER, ro_uri
from .schema import VALIDATIONS, StoreError, check_version

PER_PARAMETER = frozenset({"param_grad_norm", "param_weight_norm"})  # metric kinds over parameters, not modules
PER_MODEL = frozenset({"input_stats"})  # metric kinds of a model as a whole


@dataclass(frozen=True)
class ModuleInfo:
    id: int
    name: str
    type: str
    type_module: str | None
    parent: str | None
    n_params: int
    own_params: int
    forward_order: int | None
    file: str | None
    line: int | None
    owner: str | None
    attr: str | None
    model: str = ""
    site: str | None = None  # the creating call (pysource.CallSite.key), in stores that record it
    label: str | None = None  # a readable name (model[2]), in stores that record it
    config: dict[str, Any] | None = None  # the settings that decide its behaviour (a dropout's p)


@dataclass(frozen=True)
class Observation:
    step: int
    kind: str
    module: str | None
    data: dict[str, Any]


@dataclass(frozen=True)
class Event:
    id: int
    step: int | None
    time: float
    kind: str
    name: str
    module: str | None
    condition: str | None
    value: float | None
    message: str
    data: dict[str, Any]


@dataclass(frozen=True)
class TensorInfo:
    id: int
    step: int
    module: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


class DamagedStore(StoreError):
    """A gradsight store whose rows cannot be read as written (a dropped table, a garbage blob, a bad value)."""


def decode_array(blob: bytes) -> np.ndarray:
    if not isinstance(blob, bytes) or len(blob) % 4:
        raise ValueError(f"a metric blob of {len(blob) if isinstance(blob, bytes) else type(blob).__name__} bytes is not float32 values")
    return np.frombuffer(blob, dtype="<f4")


def _opt_int(v: Any, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError(f"{what} is {v!r}, not a whole number")
    return int(v)


def _opt_str(v: Any, what: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise ValueError(f"{what} is {v!r}, not text")


def _module(r: tuple[Any, ...]) -> ModuleInfo:
    name = _opt_str(r[1], "a module name")
    typ = _opt_str(r[2], f"the type of module {r[1]!r}")
    if name is None or typ is None:
        raise ValueError(f"module {r[0]!r} has no name or type")
    where = f"module {name!r}"
    return ModuleInfo(int(_opt_int(r[0], f"the id of {where}") or 0), name, typ, _opt_str(r[3], f"the type module of {where}"),
                      _opt_str(r[4], f"the parent of {where}"), int(_opt_int(r[5], f"the parameter count of {where}") or 0),
                      int(_opt_int(r[6], f"the own parameter count of {where}") or 0), _opt_int(r[7], f"the forward order of {where}"),
                      _opt_str(r[8], f"the file of {where}"), _opt_int(r[9], f"the line of {where}"), _opt_str(r[10], f"the owner of {where}"),
                      _opt_str(r[11], f"the attribute of {where}"), _opt_str(r[12], f"the model of {where}") or "",
                      _opt_str(r[13], f"the creating call of {where}") if len(r) > 13 else None,
                      _opt_str(r[14], f"the label of {where}") if len(r) > 14 else None,
                      _json(r[15], f"the config of {where}") if len(r) > 15 and r[15] else None)


def _json(text: Any, what: str) -> Any:
    if text is None or text == "":
        return {}
    if not isinstance(text, str):
        raise ValueError(f"{what} is {type(text).__name__}, not JSON text")
    return json.loads(text)


class RunStore:
    """A read view of one store. Cheap to open; every call reads fresh rows."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise StoreError(f"{self.path}: no such file")
        if self.path.is_dir():
            raise StoreError(f"{self.path}: is a folder, not a run store")
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        if head and head != SQLITE_HEADER:
            raise StoreError(f"{self.path}: not a gradsight run store (not an SQLite file)")
        try:
            self.conn = sqlite3.connect(ro_uri(self.path), uri=True, check_same_thread=False)
            self.conn.execute("PRAGMA busy_timeout=5000")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot be opened ({exc})") from None
        try:
            check_version(self.conn, str(self.path))
        except StoreError:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- run and structure --------------------------------------------------
    def run(self) -> dict[str, Any]:
        cur = self.conn.execute("SELECT * FROM run WHERE id = 1")
        row = cur.fetchone()
        if row is None:
            return {}
        out = dict(zip([d[0] for d in cur.description], row))
        for key in ("argv", "settings", "models", "optimizers"):
            if isinstance(out.get(key), str):
                try:
                    out[key] = json.loads(out[key])
                except json.JSONDecodeError:
                    pass
        return out

    def modules(self) -> list[ModuleInfo]:
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(modules)")}
        extra = "".join(f", {c}" if c in have else ", NULL" for c in ("site", "label", "config"))  # stores written before these columns
        rows = self.conn.execute(
            "SELECT id, name, type, type_module, parent, n_params, own_params, forward_order, file, line, owner, attr, model" + extra
            + " FROM modules ORDER BY id"
        ).fetchall()
        return [_module(r) for r in rows]

    def params(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM params ORDER BY id")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    # -- steps and metrics --------------------------------------------------
    def steps(self) -> dict[str, np.ndarray]:
        """Columns of the steps table as arrays (NULL as NaN), ordered by step."""
        cur = self.conn.execute("SELECT * FROM steps ORDER BY step")
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
        out: dict[str, np.ndarray] = {}
        for i, c in enumerate(cols):
            column = [np.nan if r[i] is None else r[i] for r in rows]
            bad = next((v for v in column if isinstance(v, (str, bytes))), None)
            if bad is not None:
                raise ValueError(f"the steps table's {c} column holds {bad!r}, not a number")
            out[c] = np.array(column, dtype=np.float64)
        out["step"] = out["step"].astype(np.int64)
        return out

    def last_step(self) -> int | None:
        row = self.conn.execute("SELECT MAX(step) FROM steps").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def metric_kinds(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT kind FROM metrics ORDER BY kind")]

    def offsets(self, kind: str) -> dict[int, int]:
        """Where each watched model's values start in a metric's row: module ids, or parameter ids for
        per-parameter kinds (one model: everything at 0)."""
        models = self.run().get("models")
        if not isinstance(models, list):
            return {0: 0}
        key = "param_offset" if kind in PER_PARAMETER else "module_offset"
        out = {}
        for m in models:
            if isinstance(m, dict) and isinstance(m.get("part"), int) and isinstance(m.get(key), int):
                out[m["part"]] = m[key]
        return out or {0: 0}

    def metric(self, kind: str, *, since: int | None = None, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, matrix[len(steps), width]) of a per-module (or per-parameter) metric: each watched model's
        values at its modules' (parameters') ids; a per-model kind (input statistics) is the first model's."""
        sql = "SELECT step, part, data FROM metrics WHERE kind = ?"
        args: list[Any] = [kind]
        if kind in PER_MODEL:
            sql += " AND part = 0"
        if since is not None:
            sql += " AND step >= ?"
            args.append(since)
        rows = self.conn.execute(sql + " ORDER BY step, part", args).fetchall()
        offsets = self.offsets(kind) if kind not in PER_MODEL else {0: 0}
        steps = sorted({int(r[0]) for r in rows})
        at = {s: i for i, s in enumerate(steps)}
        parts = [(at[int(r[0])], offsets.get(int(r[1]), 0), decode_array(r[2])) for r in rows]
        if width is None:
            width = max((off + len(a) for _, off, a in parts), default=0)
        mat = np.full((len(steps), width), np.nan, dtype=np.float32)
        for i, off, a in parts:
            n = max(0, min(len(a), width - off))
            mat[i, off:off + n] = a[:n]
        return np.array(steps, dtype=np.int64), mat

    def model_steps(self) -> dict[int, dict[str, np.ndarray]]:
        """The steps of each watched model after the first (by part): loss, lr, grad_norm, ... as arrays."""
        out: dict[int, dict[str, np.ndarray]] = {}
        rows = self.conn.execute("SELECT part, step, loss, lr, grad_norm, grad_max, n_backward, skipped FROM model_steps ORDER BY part, step")
        cols = ("step", "loss", "lr", "grad_norm", "grad_max", "n_backward", "skipped")
        by_part: dict[int, list[tuple[Any, ...]]] = {}
        for r in rows.fetchall():
            by_part.setdefault(int(r[0]), []).append(r[1:])
        for part, rs in by_part.items():
            out[part] = {c: np.array([np.nan if r[i] is None else r[i] for r in rs], dtype=np.float64) for i, c in enumerate(cols)}
        return out

    def metric_at(self, kind: str, step: int) -> np.ndarray | None:
        steps, mat = self.metric(kind, since=step)
        return mat[0] if len(steps) and steps[0] == step else None

    # -- events, tensors, watches ---------------------------------------------
    def events(self, kind: str | None = None) -> list[Event]:
        sql = "SELECT id, step, time, kind, name, module, condition, value, message, data FROM events"
        args: tuple[Any, ...] = ()
        if kind is not None:
            sql += " WHERE kind = ?"
            args = (kind,)
        out = []
        for r in self.conn.execute(sql + " ORDER BY id", args):
            data = _json(r[9], f"the data of event {r[0]}")
            out.append(Event(r[0], _opt_int(r[1], f"the step of event {r[0]}"), r[2], r[3], r[4], r[5], r[6], r[7], r[8] or "",
                             data if isinstance(data, dict) else {}))
        return out

    def observations(self, kind: str | None = None) -> list[Observation]:
        sql = "SELECT step, kind, module, data FROM observations"
        args: tuple[Any, ...] = ()
        if kind is not None:
            sql += " WHERE kind = ?"
            args = (kind,)
        out = []
        for r in self.conn.execute(sql + " ORDER BY rowid", args):
            data = _json(r[3], f"an observation of step {r[0]}")
            out.append(Observation(int(_opt_int(r[0], "an observation's step") or 0), str(r[1]), r[2], data if isinstance(data, dict) else {}))
        return out

    def tensors(self, step: int | None = None) -> list[TensorInfo]:
        sql = "SELECT id, step, module, role, dtype, shape, nbytes FROM tensors"
        args: tuple[Any, ...] = ()
        if step is not None:
            sql += " WHERE step = ?"
            args = (step,)
        return [TensorInfo(r[0], r[1], r[2], r[3], r[4], tuple(_json(r[5], f"the shape of tensor {r[0]}")), r[6])
                for r in self.conn.execute(sql + " ORDER BY id", args)]

    def tensor(self, tensor_id: int) -> np.ndarray:
        row = self.conn.execute("SELECT npy FROM tensors WHERE id = ?", (tensor_id,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no captured tensor {tensor_id}")
        try:
            return np.load(io.BytesIO(row[0]), allow_pickle=False)
        except (ValueError, OSError, TypeError, EOFError) as exc:
            raise DamagedStore(f"{self.path}: captured tensor {tensor_id} cannot be read ({exc})") from None

    def watches(self) -> list[dict[str, Any]]:
        cur = self.conn.execute("SELECT * FROM watches ORDER BY id")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]


def add_watch(path: str | os.PathLike[str], condition: str, *, module: str | None = None, file: str | None = None,
              line: int | None = None, origin: str = "editor") -> int:
    """Write a tensor breakpoint into a store's watches table (the runtime polls it)."""
    RunStore(path).close()  # validates the file
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        with conn:
            cur = conn.execute(
                "INSERT INTO watches (condition, module, file, line, enabled, created, origin) VALUES (?,?,?,?,1,?,?)",
                (condition, module, file, line, time.time(), origin),
            )
        return int(cur.lastrowid or 0)
    finally:
        conn.close()


def add_validation(path: str | os.PathLike[str], fix: str, verdict: str, summary: str, effect: str, details: dict[str, Any]) -> None:
    """Record a fix's validation verdict (``gradsight validate``) in the store it was validated against."""
    RunStore(path).close()  # validates the file
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        with conn:
            conn.execute(VALIDATIONS)  # stores written before validations existed
            conn.execute("INSERT OR REPLACE INTO validations (fix, verdict, summary, effect, details, created) VALUES (?,?,?,?,?,?)",
                         (fix, verdict, summary, effect, json.dumps(details), time.time()))
    finally:
        conn.close()


def validations(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The stored verdicts by fix id ({} for a store with none)."""
    try:
        conn = sqlite3.connect(ro_uri(path), uri=True, timeout=1.0)
    except sqlite3.Error:
        return {}
    try:
        rows = conn.execute("SELECT fix, verdict, summary, effect, details, created FROM validations").fetchall()
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    out: dict[str, dict[str, Any]] = {}
    for fix, verdict, summary, effect, details, created in rows:
        try:
            extra = json.loads(details) if details else {}
        except (ValueError, TypeError):
            extra = {}
        out[str(fix)] = {"verdict": str(verdict), "summary": str(summary), "effect": str(effect or ""), "details": extra, "time": created}
    return out


def signature(path: str | os.PathLike[str]) -> tuple[Any, ...] | None:
    """Changes whenever the store gains a step, metrics, an event, a captured tensor or a status; None if unreadable."""
    try:
        conn = sqlite3.connect(ro_uri(path), uri=True, timeout=1.0)
        try:
            # only indexed maxima: no scan, whatever the run's length
            row = conn.execute("SELECT (SELECT MAX(step) FROM steps), (SELECT MAX(step) FROM metrics), (SELECT MAX(id) FROM events),"
                               " (SELECT MAX(id) FROM tensors), (SELECT status FROM run WHERE id = 1)").fetchone()
        finally:
            conn.close()
        return tuple(row)
    except sqlite3.Error:
        return None


def quick_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run's latest step, loss, status and anomaly count: a few indexed reads, for the steps between analyses."""
    try:
        conn = sqlite3.connect(ro_uri(path), uri=True, timeout=1.0)
        try:
            row = conn.execute("SELECT step, loss FROM steps ORDER BY step DESC LIMIT 1").fetchone()
            status = conn.execute("SELECT status FROM run WHERE id = 1").fetchone()
            anomalies = conn.execute("SELECT COUNT(*) FROM events WHERE kind IN ('trigger', 'breakpoint')").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    loss = row[1] if row and isinstance(row[1], float) and np.isfinite(row[1]) else None
    return {"step": row[0] if row else None, "loss": loss, "status": status[0] if status else None, "anomalies": anomalies[0]}
