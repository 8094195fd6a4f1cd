"""``gradsight validate``: re-run the script with each candidate fix applied and say whether it removed the fault.

For each fix: the script is copied into a temporary folder, the fix's edits applied, and the copy run under
``gradsight trace --max-steps K`` with the original argv, working directory and import path (the original
script's folder first), so its seeds and data are the same. K is the anomaly's step plus a margin, or the
whole run when it is short. The re-run is compared with the original: exit status, whether a root cause of
the same kind remains, the loss at the last step both ran, the largest gradient norm. A re-run is stopped as
soon as it is clearly worse (its loss non-finite where the original's was finite, or 10x the original's for
several steps, and above where the original started). Verdicts go into the run store's ``validations`` table, so the diagnosis, the reports and
the editor list validated fixes first with their measured effect.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import kinds
from ..analysis.data import RunData, load
from ..analysis.diagnose import analyse_run, thresholds_for
from ..store import StoreError, add_validation, validations
from .edits import Edit, apply

MARGIN = 20  # steps past the anomaly a re-run goes on
SHORT_RUN = 400  # a run of at most this many steps is re-run whole
WORSE_FACTOR = 10.0
WORSE_STEPS = 5
TIMEOUT_S = 900


class ValidateError(Exception):
    """The run cannot be validated (no script, no fixes, a fix id it does not have); the message says why."""


@dataclass
class Outcome:
    fix: str
    title: str
    verdict: str  # validated | did_not_help | worse | failed
    summary: str
    effect: str
    exit_status: int | None = None
    root_cause: dict[str, Any] | None = None
    loss: float | None = None  # the re-run's loss at the compared step
    loss_before: float | None = None
    at_step: int | None = None
    grad_norm_max: float | None = None
    grad_norm_max_before: float | None = None
    steps: int = 0
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def read_verdicts(store: str) -> dict[str, dict[str, Any]]:
    return validations(store)


def budget(data: RunData, anomaly_step: int | None, steps: int | None) -> int:
    """How many optimizer steps a re-run takes."""
    if steps:
        return int(steps)
    n = int(data.steps["step"][-1]) if data.n_steps else 0
    if n <= SHORT_RUN or anomaly_step is None:
        return max(n, 1)
    return min(n, int(anomaly_step) + max(MARGIN, int(anomaly_step) // 4))


def _losses(data: RunData) -> dict[int, float]:
    return {int(s): float(v) for s, v in zip(data.steps["step"], data.steps["loss"])}


def _tail_loss(losses: dict[int, float], upto: int) -> tuple[float, int]:
    """The mean loss of the last tenth (at least 5 steps) of the steps up to ``upto``; inf when any is not finite."""
    keys = sorted(k for k in losses if k <= upto)
    if not keys:
        return float("inf"), 0
    tail = keys[-max(5, len(keys) // 10):]
    vals = np.array([losses[k] for k in tail], dtype=np.float64)
    return (float(vals.mean()) if np.all(np.isfinite(vals)) else float("inf")), tail[-1]


def _grad_max(data: RunData, upto: int) -> float:
    g = np.asarray(data.steps["grad_norm"], dtype=np.float64)[np.asarray(data.steps["step"]) <= upto]
    return float(np.nanmax(np.where(np.isfinite(g), g, np.inf))) if g.size else float("nan")


def _watch(proc: subprocess.Popen[bytes], store: Path, before: dict[int, float]) -> str | None:
    """Wait for the re-run; stop it as soon as it is clearly worse than the original. Returns why it was stopped."""
    from ..store import RunStore

    bad = 0
    seen = 0
    start = [v for _, v in sorted(before.items()) if np.isfinite(v)][:5]
    ceiling = 1.5 * max(start) if start else float("inf")  # worse than the run was at its start
    while proc.poll() is None:
        time.sleep(0.5)
        if not store.exists():
            continue
        try:
            with RunStore(str(store)) as st:
                steps = st.steps()
        except Exception:  # the store is being created; read it on the next turn
            continue
        for s, v in zip(steps["step"].tolist(), steps["loss"].tolist()):
            if s <= seen:
                continue
            seen = int(s)
            old = before.get(int(s))
            if old is None or not np.isfinite(old):
                continue
            if not np.isfinite(v) or (v > WORSE_FACTOR * max(abs(old), 1e-3) and v > ceiling):
                bad += 1
            else:
                bad = 0
        if bad >= WORSE_STEPS:
            proc.kill()
            proc.wait()
            return (f"stopped early: the loss was >{WORSE_FACTOR:g}x the original's and above its starting loss (or not finite)"
                    f" for {WORSE_STEPS} steps")
    return None


def run_one(data: RunData, fix: dict[str, Any], k_steps: int, cause_kind: str | None, workdir: Path) -> Outcome:
    script = Path(str(data.run["script"]))
    started = time.time()
    edits = [Edit(str(e["file"]), int(e["start"]), int(e["end"]), str(e["text"])) for e in fix.get("edits") or []]
    title = str(fix.get("title", fix["id"]))
    if not edits or any(os.path.realpath(e.file) != os.path.realpath(script) for e in edits):
        return Outcome(fix["id"], title, "failed", "the fix changes a file other than the script", "")
    folder = workdir / fix["id"]
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / script.name
    copy.write_text(apply(script.read_text(errors="replace"), edits), encoding="utf-8")
    store = folder / "run.db"
    argv = [str(a) for a in (data.run.get("argv") or [str(script)])][1:]
    env = dict(os.environ)
    pkg = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([str(script.parent), pkg] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMP_NUM_THREADS", "1")
    cwd = str(data.run.get("cwd") or script.parent)
    if not os.path.isdir(cwd):
        cwd = str(script.parent)
    cmd = [sys.executable, "-m", "gradsight", "trace", str(copy), *argv, "--output", str(store), "--quiet", "--max-steps", str(k_steps)]
    before = _losses(data)
    with open(folder / "output.txt", "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            stopped = _watch(proc, store, before)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    status = proc.returncode
    seconds = time.time() - started
    tail = (folder / "output.txt").read_text(errors="replace").strip().splitlines()[-3:]
    loss0, at0 = _tail_loss(before, k_steps)
    g0 = _grad_max(data, k_steps)
    if stopped:
        return Outcome(fix["id"], title, "worse", stopped, "", status, seconds=seconds, loss_before=loss0, grad_norm_max_before=g0)
    try:
        new = load(str(store))
    except (StoreError, OSError) as exc:
        why = " | ".join(tail) or str(exc)
        return Outcome(fix["id"], title, "failed", f"the fixed script did not run: {why}", "", status, seconds=seconds)
    findings, cause = analyse_run(new, thresholds_for(new))
    after = _losses(new)
    last = int(new.steps["step"][-1]) if new.n_steps else 0
    upto = min(last, at0 or last)
    loss1, at1 = _tail_loss(after, upto)
    loss0, at0 = _tail_loss(before, upto)
    g1 = _grad_max(new, upto)
    same = cause is not None and cause_kind is not None and cause.kind == cause_kind
    ok_exit = status == 0
    lower = loss1 < loss0 if np.isfinite(loss0) else np.isfinite(loss1)
    if not lower and _improper(before) and np.isfinite(loss1) and min(after.values(), default=0.0) >= 0:
        lower = True  # the faulty loss went below 0, which no proper loss does (targets outside the loss's range): not a fit to beat
    label = kinds.label(cause_kind) if cause_kind else "the fault"
    parts = [f"{label + ' gone' if not same else label + ' remains'} through step {last}",
             f"loss {_num(loss1)} vs {_num(loss0)} at step {at1 or upto}", f"grad norm <= {_num(g1)} (was {_num(g0)})"]
    if not ok_exit:
        parts.insert(0, f"exit status {status}: " + (" | ".join(tail) if tail else ""))
    if ok_exit and not same and lower:
        verdict = "validated"
    elif not ok_exit and last == 0:
        verdict = "failed"
    elif not lower and np.isfinite(loss0) and (not np.isfinite(loss1) or loss1 > 1.5 * loss0):
        verdict = "worse"
    else:
        verdict = "did_not_help"
    summary = f"{verdict.replace('_', ' ')}: " + "; ".join(parts)
    effect = "; ".join(parts) if verdict == "validated" else ""
    rc = None if cause is None else {"module": cause.module, "kind": cause.kind}
    return Outcome(fix["id"], title, verdict, summary, effect, status, rc, _finite(loss1), _finite(loss0), at1 or upto,
                   _finite(g1), _finite(g0), last, seconds)


def _improper(losses: dict[int, float]) -> bool:
    vals = [v for v in losses.values() if np.isfinite(v)]
    return bool(vals) and min(vals) < 0


def _num(v: float) -> str:
    return f"{v:.3g}" if np.isfinite(v) else "non-finite"


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def candidates(store: str, fix_ids: list[str] | None, top: int) -> tuple[RunData, list[dict[str, Any]], str | None, int | None]:
    from . import suggest

    data = load(store)
    script = data.run.get("script")
    if not script or not os.path.isfile(str(script)):
        raise ValidateError(f"{store}: the run's script {script!r} is not on this machine; validate re-runs it")
    findings, cause = analyse_run(data, thresholds_for(data))
    fixes = suggest(cause, findings, data, str(script), limit=0)
    if fix_ids:
        known = {f["id"]: f for f in fixes}
        missing = [i for i in fix_ids if i not in known]
        if missing:
            raise ValidateError(f"{store}: no fix {', '.join(map(repr, missing))} for this run (it has: {', '.join(known) or 'none'})")
        chosen = [known[i] for i in fix_ids]
    else:
        chosen = fixes[:top]
    if not chosen:
        raise ValidateError(f"{store}: no fix to validate (the diagnosis offers none for this run)")
    anomaly = cause.step if cause is not None else None
    return data, chosen, (cause.kind if cause is not None else None), anomaly


def validate(store: str, fix_ids: list[str] | None = None, top: int = 3, steps: int | None = None, jobs: int = 1,
             progress: Callable[[int, int, Outcome], None] | None = None, keep: str | None = None) -> list[Outcome]:
    data, chosen, kind, anomaly = candidates(store, fix_ids, top)
    k = budget(data, anomaly, steps)
    tmp = Path(keep).resolve() if keep else Path(tempfile.mkdtemp(prefix="gradsight-validate-"))
    tmp.mkdir(parents=True, exist_ok=True)
    results: list[Outcome | None] = [None] * len(chosen)
    done = 0
    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            futures = {pool.submit(run_one, data, f, k, kind, tmp): i for i, f in enumerate(chosen)}
            for fut in futures:
                i = futures[fut]
                out = fut.result()
                results[i] = out
                done += 1
                add_validation(store, out.fix, out.verdict, out.summary, out.effect, {**out.as_json(), "digest": chosen[i].get("digest")})
                if progress is not None:
                    progress(done, len(chosen), out)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return [r for r in results if r is not None]


def main(argv: list[str]) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="gradsight validate", description="re-run the script with each candidate fix and say whether it removed the fault")
    ap.add_argument("store", help="a run store written by gradsight trace")
    ap.add_argument("--fix", action="append", default=None, metavar="ID", help="validate this fix (repeatable)")
    ap.add_argument("--top", type=int, default=3, help="validate the first N fixes the diagnosis offers (default 3)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per re-run (default: the anomaly's step plus a margin)")
    ap.add_argument("--jobs", type=int, default=1, help="re-runs in parallel")
    ap.add_argument("--keep", default=None, help="keep the fixed scripts and their stores in this folder")
    ap.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    args = ap.parse_args(argv)
    if args.top < 1 or (args.steps is not None and args.steps < 1) or args.jobs < 1:
        print("gradsight validate: --top, --steps and --jobs take a positive number", file=sys.stderr)
        return 2
    if not os.path.isfile(args.store):
        print(f"gradsight validate: {args.store}: no such file", file=sys.stderr)
        return 2

    def show(i: int, n: int, o: Outcome) -> None:
        print(f"validate: {i}/{n} {o.fix} {o.verdict} ({o.seconds:.0f} s)", file=sys.stderr, flush=True)

    try:
        print(f"validate: 0/{'?' if not args.fix else len(args.fix)} re-running {args.store}", file=sys.stderr, flush=True)
        out = validate(args.store, args.fix, args.top, args.steps, args.jobs, show, args.keep)
    except (ValidateError, StoreError) as exc:
        print(f"gradsight validate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"store": os.path.abspath(args.store), "fixes": [o.as_json() for o in out]}, indent=2))
    else:
        for o in out:
            print(f"{o.fix}: {o.summary}")
    return 0
