"""Do gradsight's fixes remove the fault? Measured on the fault zoo's faulty runs (issue 16).

    python benchmarks/faultzoo/fixes.py [--split heldout|dev|all] [--stores DIR] [--jobs N] [-k SUBSTRING]
                                        [--top 3] [--json FILE]

For each faulty kept run of the split, its store (``run.py --keep DIR`` writes them; without ``--stores``
this runs ``run.py --keep`` first into a temporary folder) is given to ``gradsight validate STORE --top N
--json``, which applies each of the first N fixes the diagnosis offers, as the tool places them, to a copy
of the script and re-runs it. A fix **works** when the re-run exits 0, its root cause is no longer of the
faulty run's root-cause kind nor of an expected kind of the fault, and its loss is lower than the faulty
run's. Printed: the share of faulty runs whose **first** fix works (and how many have no fix), the share
where **some** validated fix among the top N works (what ``validate --top N`` gives the user; the others
are re-run only when the first does not work), the fixes that made the script fail to run, per family. Tune on dev only; run the held-out half to measure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import zoo  # noqa: E402

ROOT = zoo.ROOT
TIMEOUT_S = 1800


def works(outcome: dict[str, Any], expected_kinds: set[str]) -> bool:
    rc = outcome.get("root_cause") or {}
    return (outcome.get("verdict") == "validated" and outcome.get("exit_status") == 0
            and rc.get("kind") not in expected_kinds)


def failed_to_run(outcome: dict[str, Any]) -> bool:
    """The fixed script crashed or could not start (a stopped-early worse run is not a crash)."""
    return outcome.get("verdict") == "failed" or (outcome.get("exit_status") not in (0, None, -9) and outcome.get("verdict") != "worse")


def _gradsight(*args: str) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "pyserver"), OMP_NUM_THREADS="1")
    try:
        p = subprocess.run([sys.executable, "-m", "gradsight", *args], capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, "", "timed out"
    return p.returncode, p.stdout, p.stderr


def validate(store: Path, top: int, keep: Path, expected: set[str]) -> dict[str, Any]:
    """The first fix's verdict; the next ones' only when the first does not work (what --top N would find)."""
    rc, out, err = _gradsight("diagnose", str(store), "--json")
    if rc != 0:
        return {"error": (err.strip().splitlines() or ["diagnose failed"])[-1]}
    ids = [f["id"] for f in json.loads(out).get("fixes") or []][:top]
    if not ids:
        return {"fixes": [], "offered": []}
    results: list[dict[str, Any]] = []
    for batch in ([ids[0]], ids[1:]):
        if not batch or any(works(r, expected) for r in results):
            continue
        rc, out, err = _gradsight("validate", str(store), *[a for i in batch for a in ("--fix", i)], "--json", "--keep", str(keep))
        if rc != 0:
            results += [{"fix": i, "verdict": "failed", "error": (err.strip().splitlines() or ["?"])[-1]} for i in batch]
            continue
        results += json.loads(out)["fixes"]
    return {"fixes": results, "offered": ids}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="heldout", choices=["dev", "heldout", "all"])
    ap.add_argument("--stores", default=None, help="the --keep folder of a run.py run of this split")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--top", type=int, default=3)
    ap.add_argument("-k", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    manifest = json.loads((HERE / "manifest.json").read_text())
    runs = [m for m in manifest["mutants"] if m["kept"] and not m["healthy"] and (args.split == "all" or m["half"] == args.split)
            and (not args.k or args.k in m["id"])]
    tmp = tempfile.TemporaryDirectory(prefix="gradsight-fixes-")
    stores = Path(args.stores) if args.stores else Path(tmp.name) / "stores"
    if not args.stores:
        cmd = [sys.executable, str(HERE / "run.py"), "--split", args.split, "--jobs", str(args.jobs), "--keep", str(stores)]
        if args.k:
            cmd += ["-k", args.k]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    started = time.time()
    print(f"{len(runs)} faulty runs of split {args.split}; validate --top {args.top}, {args.jobs} jobs", flush=True)

    def one(m: dict[str, Any]) -> dict[str, Any]:
        store = stores / f"{m['id']}.db"
        if not store.exists():
            return {"id": m["id"], "error": "no store (the trace failed)"}
        fresh = Path(tmp.name) / "stores-copy" / store.name  # a copy: verdicts of earlier runs must not reorder the fixes
        fresh.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(store, fresh)
        out = validate(fresh, args.top, Path(tmp.name) / "fixed" / m["id"], {e["kind"] for e in m["expected"] or []})
        out["id"] = m["id"]
        return out

    results: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(args.jobs) as pool:
        for m, res in zip(runs, pool.map(one, runs)):
            results[m["id"]] = res
            expected = {e["kind"] for e in m["expected"] or []}
            fixes = res.get("fixes") or []
            first = fixes[0] if fixes else None
            first_ok = bool(first and works(first, expected))
            any_ok = any(works(f, expected) for f in fixes)
            res.update(first_works=first_ok, top_works=any_ok, family=m["family"],
                       crashes=[f["fix"] for f in fixes if failed_to_run(f)])
            got = first["fix"] + ": " + first["verdict"] if first else res.get("error", "no fix")
            print(f"{m['id']:<58} {'ok ' if first_ok else '-- '} {'ok ' if any_ok else '-- '} {got[:90]}", flush=True)
    n = len(runs)
    first_n = sum(r.get("first_works", False) for r in results.values())
    top_n = sum(r.get("top_works", False) for r in results.values())
    no_fix = sum(1 for r in results.values() if not r.get("fixes"))
    crashes = [(i, c) for i, r in results.items() for c in r.get("crashes", [])]
    tried = sum(len(r.get("fixes") or []) for r in results.values())
    print(f"\nfirst fix works:        {first_n}/{n} = {100 * first_n / max(n, 1):.1f}%   ({no_fix} runs with no fix)")
    print(f"best of top {args.top} works:    {top_n}/{n} = {100 * top_n / max(n, 1):.1f}%")
    print(f"fixes that make the script fail to run: {len(crashes)} of {tried} tried" + (f": {crashes}" if crashes else ""))
    fam: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in results.values():
        f = fam[r.get("family", "?")]
        f[0] += 1
        f[1] += int(r.get("first_works", False))
        f[2] += int(r.get("top_works", False))
    print("\nper family (runs, first fix works, top works):")
    for name, (k, a, b) in sorted(fam.items()):
        print(f"  {name:<22} {k:>4} {a:>4} {b:>4}")
    per_fix: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # fix -> [re-run, worked]
    for r in results.values():
        expected = {e["kind"] for e in next(m for m in runs if m["id"] == r["id"])["expected"] or []}
        for f in r.get("fixes") or []:
            per_fix[f["fix"]][0] += 1
            per_fix[f["fix"]][1] += int(works(f, expected))
    print("\nper fix (re-runs, worked):")
    for name, (k, a) in sorted(per_fix.items()):
        print(f"  {name:<40} {k:>4} {a:>4}")
    print(f"total time {time.time() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"split": args.split, "runs": n, "first_works": first_n, "top_works": top_n,
                                               "no_fix": no_fix, "crashes": crashes, "results": results}, indent=1))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
