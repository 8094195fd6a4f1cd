"""Diagnose stores the runner kept, again, with the analysis as it is now (no training: seconds, not minutes).

    python benchmarks/faultzoo/run.py --split dev --keep DIR        # trace once, keeping the stores
    python benchmarks/faultzoo/rediagnose.py DIR [--split dev] [-k SUBSTRING] [--all]

For writing and tuning rules on the development half: the runtime's records stay as they were traced, the
analysis is the working tree's. Prints the runs it gets wrong (every run with --all) and the summary of
run.py. A change of the runtime needs a new trace.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent / "pyserver")]

from run import expected_words, print_summary, score, select, summarize  # noqa: E402

from gradsight.analysis.data import load  # noqa: E402
from gradsight.analysis.diagnose import analyse_run, build  # noqa: E402
from gradsight.store import StoreError  # noqa: E402
from gradsight.thresholds import Thresholds  # noqa: E402


def diagnose(store: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        data = load(str(store))
        findings, cause = analyse_run(data, Thresholds())
        return build(data, findings, cause), ""
    except StoreError as exc:
        return None, f"diagnose failed: {exc}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", help="the folder of run.py --keep")
    ap.add_argument("--split", default="dev", choices=["dev", "heldout", "all"])
    ap.add_argument("-k", default="", help="only runs whose id contains this")
    ap.add_argument("--all", action="store_true", help="print every run, not only the wrong ones")
    args = ap.parse_args()
    t0 = time.perf_counter()
    runs = []
    for entry in select(args.split, args.k):
        store = Path(args.stores) / f"{entry['id']}.db"
        if not store.exists():
            continue
        diagnosis, failure = diagnose(store)
        verdict = score(entry["expected"], diagnosis, failure)
        runs.append({**entry, "verdict": verdict, "diagnosis": diagnosis, "seconds": 0.0})
        if args.all or not verdict.right:
            conf = f"{verdict.confidence:.2f}" if verdict.confidence is not None else "  - "
            print(f"{entry['id']:<58} expected {expected_words(entry):<44} got {verdict.got:<44} conf {conf}  "
                  f"{'right' if verdict.right else 'WRONG'}")
    if not runs:
        print("no stores found for that split in", args.stores)
        return 1
    print_summary(summarize(runs), time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
