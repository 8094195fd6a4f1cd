"""The runs of a workspace and the analysed view of one of them (no LSP here)."""

from __future__ import annotations

import glob
import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import thresholds as th
from ..analysis.data import RunData, load
from ..analysis.diagnose import analyse_run, build, thresholds_for
from ..analysis.findings import Finding
from ..analysis.rootcause import RootCause
from ..fixes import attach
from ..store import Event, RunStore, StoreError, TensorInfo

DEFAULT_RUNS_FOLDER = ".gradsight/runs"


@dataclass(frozen=True)
class RunEntry:
    path: str
    mtime: float
    status: str | None
    steps: int | None
    script: str | None
    started: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "name": os.path.basename(self.path), "mtime": self.mtime, "status": self.status,
                "steps": self.steps, "script": self.script, "started": self.started}


def runs_in(folder: str) -> list[RunEntry]:
    """The stores in ``folder``, newest first (by start time, then file time); unreadable files are left out."""
    out = []
    for path in glob.glob(os.path.join(folder, "*.db")):
        try:
            mtime = max(os.path.getmtime(p) for p in (path, path + "-wal") if os.path.exists(p))
            with RunStore(path) as store:
                run = store.run()
                out.append(RunEntry(os.path.abspath(path), mtime, run.get("status"), store.last_step(), run.get("script"),
                                    run.get("started")))
        except (StoreError, sqlite3.Error, OSError):
            continue
    return sorted(out, key=lambda r: (r.started or r.mtime, r.mtime), reverse=True)


@dataclass
class RunView:
    """One store, analysed: what hovers, diagnostics and notifications read (built off the event loop)."""

    path: str
    data: RunData | None
    diagnosis: dict[str, Any] | None
    findings: list[Finding] = field(default_factory=list)
    cause: RootCause | None = None
    error: str | None = None
    built: float = 0.0
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)  # what the run captured (metadata only)

    @property
    def last_step(self) -> int | None:
        if self.data is None or not self.data.n_steps:
            return None
        return int(self.data.steps["step"][-1])

    @property
    def status(self) -> str | None:
        return None if self.data is None else self.data.run.get("status")

    def series(self, kind: str, module: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of a per-step (module None) or per-module metric."""
        if self.data is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if module is None:
            return self.data.steps["step"], self.data.steps.get(kind, np.full(self.data.n_steps, np.nan))
        if module not in self.data.index or kind not in self.data.metrics:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return self.data.series(kind, module)

    def events(self) -> list[Event]:
        return [] if self.data is None else self.data.events

    def state(self) -> dict[str, Any]:
        """What a status bar shows: the run, its step, loss, anomalies, and gradsight's own slowdown when it warned of one."""
        steps = self.data.steps if self.data is not None else None
        loss = None
        if steps is not None and len(steps["loss"]):
            v = float(steps["loss"][-1])
            loss = v if np.isfinite(v) else None
        anomalies = [e for e in self.events() if e.kind in ("trigger", "breakpoint")]
        overhead = next((e for e in self.events() if e.kind == "warning" and e.name == "overhead"), None)
        d = self.diagnosis or {}
        return {"run": self.path, "status": self.status, "step": self.last_step, "loss": loss, "anomalies": len(anomalies),
                "health": d.get("health"), "rootCause": d.get("root_cause"), "error": self.error,
                # gradsight's own cost when it slowed the steps noticeably: (1 + its share), and what it said
                "slowdown": None if overhead is None or overhead.value is None else 1.0 + overhead.value,
                "overhead": None if overhead is None else overhead.message}


def build_view(path: str, thresholds: th.Thresholds | None = None, overrides: dict[str, Any] | None = None) -> RunView:
    """Read and analyse a store; a store that cannot be read yet gives a view with ``error`` set.

    ``overrides`` (the editor's gradsight.thresholds setting) apply over the project's thresholds."""
    try:
        data = load(path)
    except StoreError as exc:
        return RunView(path, None, None, error=str(exc), built=time.time())
    except sqlite3.Error as exc:
        return RunView(path, None, None, error=f"{path}: {exc}", built=time.time())
    t = thresholds or thresholds_for(data)
    if overrides:
        try:
            t = th.from_mapping(overrides, "the gradsight.thresholds setting", base=t)
        except th.ThresholdError as exc:
            return RunView(path, None, None, error=str(exc), built=time.time())
    try:
        findings, cause = analyse_run(data, t)
        diagnosis = attach(build(data, findings, cause), data, findings, cause)
    except Exception as exc:  # a store that reads but holds values no run writes: one message, the server goes on
        return RunView(path, None, None, error=f"{path}: could not be analysed ({type(exc).__name__}: {exc}); the store may be damaged",
                       built=time.time())
    view = RunView(path, data, diagnosis, findings, cause, built=time.time())
    view.layers = {layer["module"]: layer for layer in diagnosis["layers"]}
    try:
        with RunStore(path) as store:
            view.tensors = store.tensors()
    except (StoreError, sqlite3.Error):
        pass
    return view
