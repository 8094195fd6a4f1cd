"""The run store's schema: one SQLite file per run (and per rank), in WAL mode.

Per-module metrics are stored one row per (step, kind) with a little-endian
float32 array indexed by module id (``modules.id``, 0..n-1), NaN where a module
has no value; per-parameter ones likewise over ``params.id``. That keeps a
step's write to a handful of rows whatever the model's size.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 2
SCHEMA_PREFIX = "gradsight.store/"
SCHEMA_NAME = f"{SCHEMA_PREFIX}{SCHEMA_VERSION}"

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS run (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    script TEXT, argv TEXT, cwd TEXT, started REAL, ended REAL, status TEXT,
    torch_version TEXT, gradsight_version TEXT, python_version TEXT,
    device TEXT, rank INTEGER, world_size INTEGER, pid INTEGER, settings TEXT,
    model TEXT, optimizer TEXT, loss_source TEXT, loss_module TEXT,
    models TEXT,  -- JSON: [{"name", "part", "type", "module_offset", ...}] of every watched model, when there are several
    run_group TEXT,  -- the distributed run (torchrun) whose ranks' stores are siblings; NULL for one process
    optimizers TEXT,  -- JSON: [{"type", "groups": [{"lr", "initial_lr", "weight_decay", "eps", "betas", "momentum", ...}]}]
    input_arg TEXT  -- which argument of the model's call the input statistics are of: its position, or its keyword
);
CREATE TABLE IF NOT EXISTS modules (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
    type_module TEXT, parent TEXT, n_params INTEGER NOT NULL, own_params INTEGER NOT NULL,
    forward_order INTEGER, file TEXT, line INTEGER, owner TEXT, attr TEXT,
    model TEXT,  -- the short name of the watched model it belongs to ('' when the run has one model)
    site TEXT,  -- the creating call, as scope|callee|index in file (pysource.CallSite.key)
    label TEXT,  -- a readable name: model[2], net.fc1
    config TEXT  -- JSON: settings of the module that decide its behaviour (a dropout's p, an activation's slope, ...)
);
CREATE TABLE IF NOT EXISTS params (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, module_id INTEGER NOT NULL,
    shape TEXT NOT NULL, numel INTEGER NOT NULL, trainable INTEGER NOT NULL,
    in_optimizer INTEGER NOT NULL DEFAULT 0, got_grad INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS steps (
    step INTEGER PRIMARY KEY, time REAL NOT NULL, duration REAL, loss REAL, lr REAL,
    grad_norm REAL, grad_max REAL, sampled INTEGER NOT NULL, n_backward INTEGER,
    grads_zeroed INTEGER, capture INTEGER NOT NULL DEFAULT 0,
    loss_finite INTEGER,  -- 0 when the loss was NaN/Inf (SQLite stores NaN as NULL), NULL with no loss
    skipped INTEGER NOT NULL DEFAULT 0,  -- 1: the optimizer did not step (a GradScaler found inf/NaN gradients)
    clip_norm REAL,  -- the max_norm (or clip value) the step's gradients were clipped with
    grad_norm_clipped REAL,  -- the global gradient norm after clipping (grad_norm is before)
    amp_scale REAL,  -- the GradScaler's scale the backward ran with (loss and gradients are recorded unscaled)
    clip_value REAL  -- the clip_value of clip_grad_value_ the step's gradients were clipped with
);
CREATE TABLE IF NOT EXISTS metrics (
    step INTEGER NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL,
    part INTEGER NOT NULL DEFAULT 0,  -- the watched model (run.models) the values belong to: its modules' (or parameters') slice
    PRIMARY KEY (step, kind, part)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS model_steps (  -- the steps of every watched model but the first, whose steps are the steps table
    step INTEGER NOT NULL, part INTEGER NOT NULL, time REAL, loss REAL, lr REAL, grad_norm REAL, grad_max REAL,
    n_backward INTEGER, skipped INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (step, part)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS metrics_kind ON metrics(kind, step);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, step INTEGER, time REAL NOT NULL, kind TEXT NOT NULL,
    name TEXT NOT NULL, module TEXT, condition TEXT, value REAL, message TEXT, data TEXT
);
CREATE INDEX IF NOT EXISTS events_step ON events(step);
CREATE TABLE IF NOT EXISTS tensors (
    id INTEGER PRIMARY KEY, step INTEGER NOT NULL, module TEXT NOT NULL, role TEXT NOT NULL,
    dtype TEXT NOT NULL, shape TEXT NOT NULL, nbytes INTEGER NOT NULL, npy BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS tensors_step ON tensors(step);
CREATE TABLE IF NOT EXISTS observations (  -- what a measured step's functions were given (loss inputs, attention, dropout)
    step INTEGER NOT NULL, kind TEXT NOT NULL, module TEXT, data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS observations_step ON observations(step);
CREATE TABLE IF NOT EXISTS watches (
    id INTEGER PRIMARY KEY, condition TEXT NOT NULL, module TEXT, file TEXT, line INTEGER,
    enabled INTEGER NOT NULL DEFAULT 1, created REAL, origin TEXT
);
CREATE TABLE IF NOT EXISTS validations (  -- gradsight validate: each fix's re-run and its verdict
    fix TEXT PRIMARY KEY, verdict TEXT NOT NULL, summary TEXT NOT NULL, effect TEXT, details TEXT, created REAL
);
"""
VALIDATIONS = """CREATE TABLE IF NOT EXISTS validations (
    fix TEXT PRIMARY KEY, verdict TEXT NOT NULL, summary TEXT NOT NULL, effect TEXT, details TEXT, created REAL
)"""

# Event kinds.
EVENT_TRIGGER = "trigger"
EVENT_BREAKPOINT = "breakpoint"
EVENT_WARNING = "warning"
NEVER_STEPPED = "never_stepped"  # a warning event's name: backward() ran and the optimizer never stepped
UNREGISTERED = "unregistered"  # a warning event's name: parameters in a plain list/dict of the model got gradients, no update
EVENT_SKIPPED = "skipped"  # a step the optimizer did not take (GradScaler), recorded as its own step
EVENT_ORIGIN = "origin"  # where the runtime traced non-finite values to (a module whose backward made them)


class StoreError(Exception):
    """A file that is not a gradsight store, or one this version cannot read."""


def configure(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a committed transaction survives the process being
    # killed; only an OS crash may lose the last ones.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")


def create(conn: sqlite3.Connection) -> None:
    configure(conn)
    conn.executescript(DDL)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_NAME,))
    conn.commit()


def check_version(conn: sqlite3.Connection, path: str) -> None:
    """Raise :class:`StoreError` unless ``conn`` is a store of this schema."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: not a gradsight run store ({exc})") from None
    if row is None:
        raise StoreError(f"{path}: not a gradsight run store (no schema record)")
    if row[0] != SCHEMA_NAME:
        raise StoreError(
            f"{path}: store schema {row[0]!r}, but this gradsight reads {SCHEMA_NAME!r}; "
            "re-run the training with this version, or open it with the version that wrote it"
        )
