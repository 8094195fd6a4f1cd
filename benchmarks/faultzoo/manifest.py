"""Manifestation check: run every mutant and its base plainly, keep the mutants whose fault shows.

    python benchmarks/faultzoo/manifest.py [--jobs N] [-k SUBSTRING [--merge]] [--fresh]

Each base and each in-half mutant (see split.toml) runs without gradsight under `harness.py`,
which records every optimizer step's loss. A mutant is compared with its own base over the
same steps, and `manifest.json` records, for every mutant, whether it is kept and why.

The rule (RULE below; thresholds named there):

* start = mean loss of the first 3 steps, end = mean loss of the last tenth of the steps (at
  least 5); a base's progress P = start - end. A base must train: end <= 0.5 x start.
  A loop that never calls step() is compared over its backward passes.
* A run that raises a Python exception is dropped: a crash is not a training fault.
* A faulty mutant is kept when its fault shows: a non-finite loss at some step, a negative
  loss (every base's loss is non-negative: a negative value means targets the loss cannot
  take), or
  end_mutant - end_base >= 0.25 x P (it lost at least a quarter of the progress the base made
  over the same steps, which covers "not decreasing where the base's does"), or
  end_mutant >= 2 x end_base with end_mutant - end_base >= 0.1 x P (twice the base's final
  loss, for bases whose loss ends near zero). For operators that
  change the loss's function or scale (`rescales_loss`), both runs' losses are first divided
  by their own start, so the comparison is of relative progress.
* A healthy (bait) mutant is kept when it still trains: finite, and
  end_mutant - end_base <= 0.15 x P (close to or below its base). Between 0.15 and 0.25 a
  mutant is neither clearly healthy nor clearly faulty, and is dropped either way.
* Construction checks: every expected module must be a `named_modules()` name of the root
  model recorded while the mutant ran (or `loss`, `optimizer`, `input`); for `no_gradient`
  answers of the graph operators the named modules must really have had no gradient at
  every step, and their descendants are added as acceptable answers.

Runs are cached by the mutant's source (`.cache/`), so a rerun only runs what changed.
Runs fork from one process that imported torch once (about 5 s of imports saved per run).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import operators as ops  # noqa: E402
import zoo  # noqa: E402

CACHE = HERE / ".cache"
TIMEOUT_S = 120

RULE = {
    "start_steps": 3,
    "end_fraction": 0.1,
    "end_min_steps": 5,
    "base_must_reach": 0.5,      # a base's end <= 0.5 x its start
    "fault_min_gap": 0.25,       # kept as faulty: end gap >= 0.25 x base progress, or a non-finite loss, or
    "fault_ratio": 2.0,          # ... end >= 2 x the base's end with a gap of at least
    "fault_ratio_min_gap": 0.1,  # ... 0.1 x base progress
    "bait_max_gap": 0.15,        # kept as healthy: finite and end gap <= 0.15 x base progress
    "text": ("faulty: non-finite or negative loss, or final loss worse than the base's by >= 25% of the base's progress, "
             "or >= 2x the base's final loss and worse by >= 10% of its progress "
             "(relative to each run's own start for operators that rescale the loss); "
             "healthy bait: finite and within 15% of the base's progress; crashes dropped"),
}

GRAPH_OPS = {"detach_mid_forward", "no_grad_block", "unused_layer"}


# ---------------------------------------------------------------------------------------------- running


def _alarm(signum, frame):  # pragma: no cover - only on a hung run
    raise TimeoutError(f"run exceeded {TIMEOUT_S} s")


def _run_one(args: tuple[str, str]) -> tuple[str, dict]:
    mid, script = args
    import harness

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    out = harness.record(script)
    signal.alarm(0)
    return mid, out


def run_all(jobs: list[tuple[str, str]], n_jobs: int) -> dict[str, dict]:
    """Run (id, script) pairs, each in a fresh process forked from this one (torch already imported)."""
    import torch  # noqa: F401  imported once here, inherited by every forked run
    import torch._dynamo  # noqa: F401  (torch.optim imports it on first use: ~2.5 s)
    try:
        import transformers  # noqa: F401
        from transformers import BertForSequenceClassification, GPT2LMHeadModel  # noqa: F401
    except Exception:
        pass
    results: dict[str, dict] = {}
    if not jobs:
        return results
    ctx = mp.get_context("fork")
    t0 = time.perf_counter()
    with ctx.Pool(n_jobs, maxtasksperchild=1) as pool:
        for i, (mid, out) in enumerate(pool.imap_unordered(_run_one, jobs), 1):
            results[mid] = out
            status = "crash" if out["error"] else ("ok" if out["finite"] else "non-finite")
            print(f"[{i:4d}/{len(jobs)}] {mid:<70} {status:<10} {out['seconds']:5.1f} s  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return results


# ---------------------------------------------------------------------------------------------- the rule


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def summary(losses: list) -> dict:
    """start, end and the first non-finite step of one run's step losses (None: a step with no backward before it)."""
    n = len(losses)
    k = max(RULE["end_min_steps"], int(round(n * RULE["end_fraction"])))
    first_bad = next((i for i, v in enumerate(losses) if v is not None and not _finite(v)), None)
    if n == 0:
        return {"steps": 0, "start": None, "end": None, "first_nonfinite_step": None}
    head = [v for v in losses[: RULE["start_steps"]] if _finite(v)]
    tail = [v for v in losses[-k:] if _finite(v)]
    return {
        "steps": n,
        "start": sum(head) / len(head) if head else None,
        "end": sum(tail) / len(tail) if tail and first_bad is None else None,
        "first_nonfinite_step": first_bad,
    }


def judge(mutant: ops.Mutant, base_rec: dict, rec: dict) -> tuple[bool, str, dict]:
    """(kept, reason, evidence) for one mutant against its base."""
    b = summary(base_rec["losses"])
    n = min(len(base_rec["losses"]), len(rec["losses"]))
    m = summary(rec["losses"][:n]) if n else summary([])
    ev = {"base_start": _r(b["start"]), "base_end": _r(b["end"]), "mutant_start": _r(m["start"]), "mutant_end": _r(m["end"]),
          "steps": m["steps"], "base_steps": b["steps"], "first_nonfinite_step": m["first_nonfinite_step"],
          "seconds": rec.get("seconds"), "lr_first_last": rec.get("lr_first_last"), "lr_max": _r(rec.get("lr_max"))}
    if rec.get("error"):
        return False, f"crash: {rec['error']}", ev
    if m["steps"] == 0:
        return False, "no optimizer step ran", ev
    progress = b["start"] - b["end"]
    if m["first_nonfinite_step"] is not None:
        if mutant.healthy:
            return False, f"bait went non-finite at step {m['first_nonfinite_step']}", ev
        return True, f"non-finite loss from step {m['first_nonfinite_step']}", ev
    negative = [i for i, v in enumerate(rec["losses"][:n]) if _finite(v) and v < 0]
    if negative and not any(_finite(v) and v < 0 for v in base_rec["losses"]):
        ev["first_negative_step"] = negative[0]
        if mutant.healthy:
            return False, f"bait loss went negative at step {negative[0]}", ev
        return True, f"the loss goes negative (impossible for the base's loss) from step {negative[0]}", ev
    if mutant.rescales_loss:
        gap = m["end"] / m["start"] - b["end"] / b["start"] if m["start"] else float("nan")
        scale = progress / b["start"]
        how = "relative to each run's start"
    else:
        gap = m["end"] - b["end"]
        scale = progress
        how = "absolute"
    ev["gap_over_progress"] = _r(gap / scale)
    frac = gap / scale
    if mutant.healthy:
        if frac <= RULE["bait_max_gap"]:
            return True, f"trains: end {m['end']:.4g} vs base {b['end']:.4g} ({frac:+.0%} of the base's progress, {how})", ev
        return False, f"bait trains worse: end {m['end']:.4g} vs base {b['end']:.4g} ({frac:+.0%} of the base's progress, {how})", ev
    if frac >= RULE["fault_min_gap"]:
        return True, f"manifests: end {m['end']:.4g} vs base {b['end']:.4g}, lost {frac:.0%} of the base's progress ({how})", ev
    ratio = (m["end"] / m["start"]) / (b["end"] / b["start"]) if mutant.rescales_loss else m["end"] / b["end"]
    ev["end_ratio"] = _r(ratio)
    if ratio >= RULE["fault_ratio"] and frac >= RULE["fault_ratio_min_gap"]:
        return True, f"manifests: end {m['end']:.4g} is {ratio:.1f}x the base's {b['end']:.4g} ({frac:.0%} of the base's progress, {how})", ev
    return False, f"does not manifest: end {m['end']:.4g} vs base {b['end']:.4g} ({frac:+.0%} of the base's progress, {how})", ev


def _r(v):
    return None if v is None else (round(v, 5) if isinstance(v, float) else v)


def finish_expected(mutant: ops.Mutant, rec: dict) -> tuple[list[dict] | None, str]:
    """Check the expected answers against the run; add descendants for graph cuts. ('' when fine, else a problem)."""
    if mutant.expected is None:
        return None, ""
    if rec.get("error") or not rec.get("modules"):
        return mutant.expected, ""  # dropped as a crash already; nothing recorded to check against
    names = set(rec.get("modules") or [])
    places = {"loss", "optimizer", "input"}
    bad = sorted({e["module"] for e in mutant.expected if e["module"] not in names | places})
    if bad:
        return mutant.expected, f"expected modules not in the root model's named_modules(): {bad}"
    exp = list(mutant.expected)
    if mutant.operator in GRAPH_OPS:
        no_grad = rec.get("no_grad_steps") or {}
        steps = rec.get("n_steps") or 0
        listed = {e["module"] for e in exp if e["kind"] == "no_gradient"}
        owners = set(rec.get("param_modules") or [])
        for mod in sorted(listed):
            own = [d for d in sorted(names) if d == mod or d.startswith(mod + ".")]
            got_grad = [d for d in own if d in owners and no_grad.get(d, 0) < steps]
            if got_grad:
                return exp, f"construction check: {got_grad} received a gradient"
            # descendants that hold parameters, and the containers between them and the cut module
            exp += [{"module": d, "kind": "no_gradient"} for d in own
                    if d != mod and (d in owners or any(o.startswith(d + ".") for o in owners))]
    return [dict(t) for t in dict.fromkeys(tuple(sorted(e.items())) for e in exp)], ""


# ---------------------------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-k", default="", help="only mutants whose id contains this (or one of these, comma-separated); "
                    "the manifest is not written")
    ap.add_argument("--merge", action="store_true",
                    help="with -k: write the selected mutants into manifest.json, every other entry as it was "
                         "(new operators are judged without re-running the whole zoo)")
    ap.add_argument("--fresh", action="store_true", help="ignore the cache")
    args = ap.parse_args()

    t0 = time.perf_counter()
    pairs = zoo.generate_all()
    if args.k:
        ks = args.k.split(",")
        keep_bases = {m.base for _, m in pairs if any(k in m.id for k in ks)}
        pairs = [(h, m) for h, m in pairs if any(k in m.id for k in ks) or (m.operator == "" and m.base in keep_bases)]
    CACHE.mkdir(exist_ok=True)
    scripts = CACHE / "scripts"
    scripts.mkdir(exist_ok=True)
    jobs, records = [], {}
    for _, m in pairs:
        sha = zoo.digest(m.source)
        cached = CACHE / f"{sha}.json"
        if cached.exists() and not args.fresh:
            records[m.id] = json.loads(cached.read_text())
            continue
        path = scripts / f"{m.id}.py"
        path.write_text(m.source)
        jobs.append((m.id, str(path)))
    print(f"{len(pairs)} runs, {len(jobs)} to run, {len(pairs) - len(jobs)} cached; {args.jobs} jobs", flush=True)
    fresh = run_all(jobs, args.jobs)
    by_id = {m.id: m for _, m in pairs}
    for mid, rec in fresh.items():
        (CACHE / f"{zoo.digest(by_id[mid].source)}.json").write_text(json.dumps(rec))
    records.update(fresh)

    split = zoo.load_split()
    bases, entries = {}, []
    for half, m in pairs:
        rec = records[m.id]
        if m.operator == "":
            s = summary(rec["losses"])
            trains = rec["error"] is None and s["end"] is not None and s["end"] <= RULE["base_must_reach"] * s["start"]
            doc = ops.load_base(m.base).docstring
            bases[m.base] = {"half": half, "title": doc.splitlines()[0] if doc else "", "steps": s["steps"],
                             "expected_steps": ops.BASE_STEPS.get(m.base), "seconds": rec["seconds"],
                             "start": _r(s["start"]), "end": _r(s["end"]), "trains": trains, "error": rec["error"]}
    for half, m in pairs:
        rec = records[m.id]
        if m.operator == "":
            b = bases[m.base]
            kept = b["trains"]
            reason = "base trains" if kept else f"BASE DOES NOT TRAIN: {b}"
            expected, ev = None, {"base_start": b["start"], "base_end": b["end"], "steps": b["steps"], "seconds": b["seconds"]}
        else:
            kept, reason, ev = judge(m, records[f"{m.base}__base"], rec)
            expected, problem = finish_expected(m, rec)
            if problem:
                kept, reason = False, f"{reason}; DROPPED, {problem}"
                print(f"!! {m.id}: {problem}", file=sys.stderr)
        entries.append({
            "id": m.id, "half": half, "base": m.base, "operator": m.operator or None, "site": m.site or None,
            "family": m.family, "why": m.why, "healthy": m.healthy, "expected": expected,
            "kept": kept, "reason": reason, "sha": zoo.digest(m.source), "evidence": ev,
        })
    for name, b in bases.items():
        if not b["trains"]:
            print(f"!! base {name} does not train: {b}", file=sys.stderr)
        if b["expected_steps"] != b["steps"]:
            print(f"!! base {name}: {b['steps']} steps, operators.BASE_STEPS says {b['expected_steps']}", file=sys.stderr)

    if args.k and args.merge:
        entries = merged(entries, {m.id: zoo.digest(m.source) for _, m in zoo.generate_all()})
    counts = count(entries)
    print_counts(counts)
    if args.k and not args.merge:
        for e in entries:
            print(f"{'KEPT' if e['kept'] else 'drop'} {e['id']:<64} {e['reason']}")
        print("(-k given: manifest.json not written)")
        return 0
    if args.k:  # the bases' entries of a merge are the previous manifest's (a base's record is the same run)
        bases = {**bases, **json.loads(zoo.MANIFEST.read_text())["bases"]}
    doc = {
        "schema": "faultzoo.manifest/1",
        "rule": RULE,
        "split": split,
        "counts": counts,
        # a merge ran a few mutants: the full run's time stays the one recorded
        "seconds": json.loads(zoo.MANIFEST.read_text())["seconds"] if args.k else round(time.perf_counter() - t0, 1),
        "bases": bases,
        "operators": [{"name": op.name, "family": op.family, "why": op.why, "healthy": op.healthy,
                       "rescales_loss": op.rescales_loss, "taxonomy": op.taxonomy, "summary": op.summary,
                       "expects": op.expects} for op in ops.OPERATORS],
        "mutants": entries,
    }
    zoo.MANIFEST.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {zoo.MANIFEST} in {time.perf_counter() - t0:.0f} s")
    return 0


def merged(selected: list[dict], current: dict[str, str]) -> list[dict]:
    """The previous manifest's entries with the selected ones put in (by id), in the zoo's generation order.

    An old entry is kept only while its mutant is still generated from the same source (its digest):
    anything else must be judged again.
    """
    old = {e["id"]: e for e in json.loads(zoo.MANIFEST.read_text())["mutants"]}
    new = {e["id"]: e for e in selected}
    out, stale = [], []
    for mid, sha in current.items():
        e = new.get(mid) or old.get(mid)
        if e is None or e["sha"] != sha:
            stale.append(mid)
            continue
        out.append(e)
    if stale:
        raise SystemExit(f"--merge: {len(stale)} mutants changed or are new and were not selected by -k, "
                         f"e.g. {stale[:3]}; select them or run the whole manifest")
    return out


def count(entries: list[dict]) -> dict:
    c: dict = {"runs": len(entries)}
    for half in ("dev", "heldout", "all"):
        es = [e for e in entries if half == "all" or e["half"] == half]
        faulty = [e for e in es if not e["healthy"]]
        healthy = [e for e in es if e["healthy"]]
        c[half] = {
            "faulty_kept": sum(e["kept"] for e in faulty), "faulty_dropped": sum(not e["kept"] for e in faulty),
            "healthy_kept": sum(e["kept"] for e in healthy), "healthy_dropped": sum(not e["kept"] for e in healthy),
            "bases": len({e["base"] for e in es}),
            "operators": len({e["operator"] for e in es if e["operator"]}),
            "kept_by_why": dict(sorted(Counter(str(e["why"]) for e in es if e["kept"]).items())),
        }
    return c


def print_counts(c: dict) -> None:
    for half in ("dev", "heldout", "all"):
        h = c[half]
        print(f"{half:8s} faulty kept {h['faulty_kept']:4d} dropped {h['faulty_dropped']:4d} | healthy kept {h['healthy_kept']:3d} "
              f"dropped {h['healthy_dropped']:3d} | bases {h['bases']} operators {h['operators']} | kept by Why class {h['kept_by_why']}")


if __name__ == "__main__":
    sys.exit(main())
