"""Trace and diagnose the fault probes (scripts written apart from the zoo and the rules) and score them.

    python benchmarks/fault_probes/run.py [--sets set_a,set_b] [-k SUBSTRING] [--jobs N] [--keep DIR]
    python benchmarks/fault_probes/run.py --rediagnose DIR      # the stores of --keep, the analysis as it is now
    python benchmarks/fault_probes/run.py --fixes DIR [--top 3]  # do the fixes offered for the kept stores work?

Each set's ``labels.toml`` names every script's expected ``{module, kind}`` answers (``[]`` for a healthy
script or bait); see CONVENTIONS.md. Scoring and the summary are the fault zoo's (``faultzoo/run.py``):
a faulty run is right when its root cause is one of its answers, a healthy one when nothing of severity
"error" is reported. Prints one line per run and the summary by Why class and by set. With ``--fixes`` each
faulty probe's first fix (then the next ones, up to ``--top``, while none works) is applied as gradsight places
it and re-run by ``gradsight validate``, judged as the zoo's ``fixes.py`` judges it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "faultzoo"), str(HERE.parent.parent / "pyserver")]

import run as zoo_run  # noqa: E402  (the fault zoo's runner: its scoring and summary)


def entries(sets: list[str], k: str) -> list[dict[str, Any]]:
    out = []
    for folder in sorted(HERE.glob("set_*")):
        if (sets and folder.name not in sets) or not (folder / "labels.toml").exists():
            continue
        labels = tomllib.loads((folder / "labels.toml").read_text())
        for p in labels.get("probe", []):
            pid = f"{folder.name}/{Path(p['script']).stem}"
            if not any(part in pid for part in k.split(",")) or not (folder / p["script"]).exists():
                continue
            expected = p.get("expected") or None
            out.append({"id": pid, "script": folder / p["script"], "expected": expected, "healthy": expected is None,
                        "why": int(p.get("why", 4 if expected is None else 0)), "half": folder.name,
                        "family": folder.name, "fault": p.get("fault", "")})
    return out


def trace_one(entry: dict[str, Any], keep: Path) -> dict[str, Any]:
    workdir = keep / entry["half"]
    workdir.mkdir(parents=True, exist_ok=True)
    source = entry["script"].read_text()
    probe = {**entry, "id": Path(entry["id"]).name}
    result = zoo_run.run_one(probe, source, workdir)
    return {**result, "id": entry["id"]}


def rediagnose_one(entry: dict[str, Any], keep: Path) -> dict[str, Any]:
    from rediagnose import diagnose  # the zoo's: the working tree's analysis on a kept store

    store = keep / entry["half"] / f"{Path(entry['id']).name}.db"
    diagnosis, failure = diagnose(store) if store.exists() else (None, "no store kept")
    return {**entry, "verdict": zoo_run.score(entry["expected"], diagnosis, failure), "diagnosis": diagnosis,
            "seconds": 0.0}


def fixes_one(entry: dict[str, Any], keep: Path, top: int) -> dict[str, Any]:
    import fixes as zoo_fixes  # the zoo's fixes benchmark: validate() and works()

    store = keep / entry["half"] / f"{Path(entry['id']).name}.db"
    if not store.exists():
        return {"error": "no store kept", "first_works": False, "top_works": False, "crashes": []}
    fresh = Path(tempfile.mkdtemp(prefix="gradsight-probe-fix-")) / store.name  # verdicts must not reorder the fixes
    shutil.copy(store, fresh)
    expected = {e["kind"] for e in entry["expected"] or []}
    out = zoo_fixes.validate(fresh, top, fresh.parent / "fixed", expected)
    fixes = out.get("fixes") or []
    out["first_works"] = bool(fixes and zoo_fixes.works(fixes[0], expected))
    out["top_works"] = any(zoo_fixes.works(f, expected) for f in fixes)
    out["crashes"] = [f["fix"] for f in fixes if zoo_fixes.failed_to_run(f)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="", help="comma-separated set folders (default: all)")
    ap.add_argument("-k", default="", help="only probes whose id contains this (or one of these, comma-separated)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", default="", help="keep the stores in this folder")
    ap.add_argument("--rediagnose", default="", help="diagnose the stores kept in this folder again (no tracing)")
    ap.add_argument("--fixes", default="", help="validate the fixes offered for the faulty stores kept in this folder")
    ap.add_argument("--top", type=int, default=3)
    args = ap.parse_args()
    es = entries([s for s in args.sets.split(",") if s], args.k)
    if not es:
        print("no probes found")
        return 1
    t0 = time.perf_counter()
    width = max(len(e["id"]) for e in es)
    runs: list[dict[str, Any]] = []
    if args.fixes:
        faulty = [e for e in es if not e["healthy"]]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda e: fixes_one(e, Path(args.fixes), args.top), faulty))
        for e, r in zip(faulty, results):
            fixes = r.get("fixes") or []
            got = f"{fixes[0]['fix']}: {fixes[0]['verdict']}" if fixes else r.get("error", "no fix")
            print(f"{e['id']:<{width}} {'ok ' if r['first_works'] else '-- '} {'ok ' if r['top_works'] else '-- '} {got[:90]}")
        n = len(faulty)
        first_n, top_n = sum(r["first_works"] for r in results), sum(r["top_works"] for r in results)
        crashes = [(e["id"], c) for e, r in zip(faulty, results) for c in r["crashes"]]
        print(f"\nfirst fix works: {first_n}/{n} = {100 * first_n / max(n, 1):.1f}%   "
              f"({sum(not r.get('fixes') for r in results)} with no fix)")
        print(f"best of top {args.top} works: {top_n}/{n} = {100 * top_n / max(n, 1):.1f}%")
        print(f"fixes that make the script fail to run: {len(crashes)}" + (f": {crashes}" if crashes else ""))
        print(f"total time {time.perf_counter() - t0:.0f} s")
        return 0
    if args.rediagnose:
        for e in es:
            runs.append(rediagnose_one(e, Path(args.rediagnose)))
            zoo_run.print_line(runs[-1], width)
    else:
        keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gradsight-probes-"))
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for r in pool.map(lambda e: trace_one(e, keep), es):
                runs.append(r)
                zoo_run.print_line(r, width)
    zoo_run.print_summary(zoo_run.summarize(runs), time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
