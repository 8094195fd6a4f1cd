"""Trace and diagnose the fault probes (scripts written apart from the zoo and the rules) and score them.

    python benchmarks/fault_probes/run.py [--sets set_a,set_b] [-k SUBSTRING] [--jobs N] [--keep DIR]
    python benchmarks/fault_probes/run.py --rediagnose DIR      # the stores of --keep, the analysis as it is now

Each set's ``labels.toml`` names every script's expected ``{module, kind}`` answers (``[]`` for a healthy
script or bait); see CONVENTIONS.md. Scoring and the summary are the fault zoo's (``faultzoo/run.py``):
a faulty run is right when its root cause is one of its answers, a healthy one when nothing of severity
"error" is reported. Prints one line per run and the summary by Why class and by set.
"""

from __future__ import annotations

import argparse
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
        if sets and folder.name not in sets:
            continue
        labels = tomllib.loads((folder / "labels.toml").read_text())
        for p in labels.get("probe", []):
            pid = f"{folder.name}/{Path(p['script']).stem}"
            if k not in pid or not (folder / p["script"]).exists():
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="", help="comma-separated set folders (default: all)")
    ap.add_argument("-k", default="", help="only probes whose id contains this")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", default="", help="keep the stores in this folder")
    ap.add_argument("--rediagnose", default="", help="diagnose the stores kept in this folder again (no tracing)")
    args = ap.parse_args()
    es = entries([s for s in args.sets.split(",") if s], args.k)
    if not es:
        print("no probes found")
        return 1
    t0 = time.perf_counter()
    width = max(len(e["id"]) for e in es)
    runs: list[dict[str, Any]] = []
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
