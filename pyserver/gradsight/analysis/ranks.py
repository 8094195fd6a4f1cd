"""The ranks of a distributed run read together: where a fault started, ranks that disagree, ranks that stopped.

Under torchrun each rank writes its own store (``run.db``, ``run.rank1.db``, ...). With data parallelism the
gradients are averaged over the ranks, so a NaN in one rank's batch reaches every rank's gradients in the same
step: each rank alone would blame its own layers. Read together, the rank whose own input, forward or loss went
non-finite first is where it started; the others only received it in the gradient all-reduce.
"""

from __future__ import annotations

import os
import sqlite3
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kinds
from ..store import RunStore, StoreError
from ..store.paths import rank_file
from ..thresholds import Thresholds
from .data import RunData, load
from .diagnose import analyse_run, build
from .findings import Finding

LOSS_OUTLIER = 10.0  # a rank whose loss is this many times the other ranks' median disagrees with them
GRAD_MISMATCH = 1e-3  # relative difference of the global gradient norm at which data-parallel ranks disagree


@dataclass
class RankRun:
    rank: int
    path: str
    data: RunData
    findings: list[Finding]
    diagnosis: dict[str, Any]


def siblings(path: str) -> list[tuple[int, str]]:
    """(rank, store) of every rank of the distributed run ``path`` belongs to; just ``path`` for one process."""
    try:
        with RunStore(path) as store:
            run = store.run()
    except (StoreError, sqlite3.Error):
        return [(0, path)]
    world, rank, group = int(run.get("world_size") or 1), int(run.get("rank") or 0), run.get("run_group")
    if world <= 1 or not group:
        return [(rank, path)]
    base = path
    if rank > 0:
        suffix = f".rank{rank}"
        stem, ext = os.path.splitext(path)
        base = stem[: -len(suffix)] + ext if stem.endswith(suffix) else path
    out = []
    for r in range(world):
        p = rank_file(base, r)
        if not os.path.isfile(p):
            continue
        try:
            with RunStore(p) as store:
                if store.run().get("run_group") == group:
                    out.append((r, p))
        except (StoreError, sqlite3.Error):
            continue
    return out or [(rank, path)]


def _start(r: RankRun) -> tuple[int, int] | None:
    """(step, how) where non-finite values appear on this rank: how 0 when its own input, forward or loss made
    them, 1 when only its gradients hold them (they may have come from another rank in the all-reduce)."""
    found = [f for f in r.findings if f.kind == kinds.NAN_INF and f.step is not None and f.direct]
    if not found:
        return None
    f = min(found, key=lambda f: f.step if f.step is not None else 10**9)
    gradient_only = "gradients are not" in f.evidence or "non-finite gradients" in f.evidence
    assert f.step is not None
    return f.step, 1 if gradient_only else 0


def combine(runs: list[RankRun]) -> dict[str, Any]:
    """The diagnosis of the rank where the fault started, with every rank's part: ``ranks`` and ``rank_findings``."""
    runs = sorted(runs, key=lambda r: r.rank)
    starts = {r.rank: _start(r) for r in runs}
    notes: list[dict[str, Any]] = []
    origin = min((r for r in runs if starts[r.rank] is not None), key=lambda r: (*starts[r.rank], r.rank), default=None)  # type: ignore[misc]
    if origin is not None:
        st, how = starts[origin.rank]  # type: ignore[misc]
        others = [r.rank for r in runs if r is not origin and starts[r.rank] is not None]
        text = f"non-finite values start on rank {origin.rank} at step {st}"
        if others and how == 0:
            text += f"; rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} got them through the gradient all-reduce"
        notes.append({"rank": origin.rank, "step": st, "kind": kinds.NAN_INF, "message": text})
    notes += _disagreements(runs)
    most = max(r.data.n_steps for r in runs)
    for r in runs:
        status = r.data.run.get("status")
        if r.data.n_steps < most or status not in ("finished", None):
            notes.append({"rank": r.rank, "step": int(r.data.steps["step"][-1]) if r.data.n_steps else None, "kind": "stopped",
                          "message": f"rank {r.rank} {status or 'stopped'} after {r.data.n_steps} steps (the others ran {most})"})
    lead = origin or next((r for r in runs if r.diagnosis.get("root_cause")), runs[0])
    d = dict(lead.diagnosis)
    if d.get("root_cause") is not None:
        d["root_cause"] = {**d["root_cause"], "rank": lead.rank}
    d["ranks"] = [{"rank": r.rank, "path": r.path, "steps": r.data.n_steps, "status": r.data.run.get("status"), "health": r.diagnosis["health"],
                   "first_nonfinite": None if starts[r.rank] is None else {"step": starts[r.rank][0],  # type: ignore[index]
                                                                           "own": starts[r.rank][1] == 0},  # type: ignore[index]
                   "root_cause": r.diagnosis.get("root_cause")} for r in runs]
    d["rank_findings"] = notes
    return d


def _disagreements(runs: list[RankRun]) -> list[dict[str, Any]]:
    """Ranks whose loss is far from the others' (or non-finite alone), and data-parallel ranks whose global
    gradient norms differ (their gradients are averaged: they must agree)."""
    out: list[dict[str, Any]] = []
    if len(runs) < 2:
        return out
    common = sorted(set.intersection(*(set(r.data.steps["step"].tolist()) for r in runs)))
    if not common:
        return out
    idx = {r.rank: {int(s): i for i, s in enumerate(r.data.steps["step"])} for r in runs}
    loss = np.array([[r.data.steps["loss"][idx[r.rank][s]] for s in common] for r in runs])
    grad = np.array([[r.data.steps["grad_norm"][idx[r.rank][s]] for s in common] for r in runs])
    for k, r in enumerate(runs):
        rest = np.delete(loss, k, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(np.where(np.isfinite(rest), rest, np.nan), axis=0) if rest.size else np.full(len(common), np.nan)
            far = (loss[k] > LOSS_OUTLIER * med) & (med > 0)
            alone = ~np.isfinite(loss[k]) & np.isfinite(rest).all(axis=0)
        bad = np.flatnonzero(far | alone)
        if len(bad):
            s = common[int(bad[0])]
            out.append({"rank": r.rank, "step": s, "kind": "loss_disagrees",
                        "message": f"rank {r.rank}'s loss {loss[k, bad[0]]:.4g} at step {s} is far from the other ranks' "
                                   f"({med[bad[0]]:.4g}): its data or its part of the model differs"})
        if k == 0:
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.abs(grad[k] - grad[0]) / np.maximum(np.abs(grad[0]), 1e-12)
        off = np.flatnonzero(np.isfinite(rel) & (rel > GRAD_MISMATCH))
        if len(off):
            s = common[int(off[0])]
            out.append({"rank": r.rank, "step": s, "kind": "gradients_disagree",
                        "message": f"rank {r.rank}'s gradient norm {grad[k, off[0]]:.4g} differs from rank 0's {grad[0, off[0]]:.4g} "
                                   f"at step {s}: the ranks' gradients are not averaged (a model outside DDP/FSDP, or a skipped sync)"})
    return out


def diagnose_ranks(paths: list[tuple[int, str]], thresholds: Thresholds) -> dict[str, Any]:
    runs = []
    for rank, p in paths:
        data = load(p)
        findings, cause = analyse_run(data, thresholds)
        runs.append(RankRun(rank, p, data, findings, build(data, findings, cause)))
    return combine(runs)
