"""Run the fault zoo under gradsight and score the diagnosis.

    python benchmarks/faultzoo/run.py [--split dev|heldout|all] [--jobs N] [--sample N]
                                      [-k SUBSTRING] [--json FILE] [--keep DIR]

Every kept mutant of the split (manifest.json; healthy bases and bait included) is written to a
temporary folder, run with ``python -m gradsight trace SCRIPT --output RUN.db --quiet`` and
diagnosed with ``python -m gradsight diagnose RUN.db --json`` (PYTHONPATH=<repo>/pyserver,
OMP_NUM_THREADS=1). A faulty run is right when the diagnosis's root cause ``{module, kind}``
is one of its expected answers; a healthy run is right when there is no root cause and no
layer issue or finding of severity "error" (a false alarm otherwise). A run whose trace writes
no store, or whose diagnosis fails, is wrong, with the reason.

Prints one line per run, then accuracy per split, Why class and operator family (with
module-only and kind-only accuracy), false alarms on healthy runs, calibration (expected
calibration error over 10 confidence bins, precision of the answers with confidence >= 0.8),
the number of "no root cause" answers and the total time.

Rules are tuned on the dev half only; run the held-out half only to measure.

The scoring is importable (``score``, ``summarize``, ``select``) for tests:

    from run import score, select
    verdict = score(expected=[{"module": "optimizer", "kind": "learning_rate_too_high"}], diagnosis=d)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import zoo  # noqa: E402

ROOT = zoo.ROOT
TRACE_TIMEOUT_S = 600
DIAGNOSE_TIMEOUT_S = 300
HIGH_CONFIDENCE = 0.8
BINS = 10
WHY_NAMES = {
    0: "classic faults", 1: "no gradient / no update", 2: "optimizer-side", 3: "symptom vs cause",
    4: "healthy and bait", 5: "loss/target mismatch", 6: "attention collapse",
}


# ---------------------------------------------------------------------------------------------- scoring


@dataclass
class Verdict:
    right: bool
    module_right: bool  # faulty runs: the root cause names an expected module (any kind)
    kind_right: bool  # faulty runs: the root cause names an expected kind (any module)
    got: str  # what the diagnosis answered, in words
    confidence: float | None  # the root cause's confidence; None without a root cause
    no_root_cause: bool  # a diagnosis that names no root cause
    false_alarm: bool  # healthy runs: a root cause or an error finding
    reason: str = ""  # why there is no diagnosis at all (the run failed); "" otherwise


def error_findings(diagnosis: dict[str, Any]) -> list[tuple[str, str]]:
    """(module, kind) of every issue or finding of severity "error"."""
    out = [(layer.get("module", "?"), i.get("kind", "?")) for layer in diagnosis.get("layers") or []
           for i in layer.get("issues") or [] if i.get("severity") == "error"]
    out += [(f.get("module", "?"), f.get("kind", "?")) for f in diagnosis.get("findings") or [] if f.get("severity") == "error"]
    return out


def score(expected: list[dict[str, str]] | None, diagnosis: dict[str, Any] | None, failure: str = "") -> Verdict:
    """Score one diagnosis (the `gradsight diagnose --json` object) against a run's expected answers.

    `expected` None is a healthy run. `diagnosis` None (with `failure` saying why) is a run that
    crashed, wrote no store or could not be diagnosed: always wrong.
    """
    if diagnosis is None:
        return Verdict(False, False, False, f"no diagnosis ({failure})", None, False, False, failure or "no diagnosis")
    rc = diagnosis.get("root_cause")
    conf = float(rc["confidence"]) if rc and rc.get("confidence") is not None else None
    if expected is None:
        errors = error_findings(diagnosis)
        ok = rc is None and not errors
        if ok:
            got = "healthy"
        elif rc is not None:
            got = f"{rc.get('module')}/{rc.get('kind')}" + (f" +{len(errors)} errors" if errors else "")
        else:
            got = "errors " + ", ".join(f"{m}/{k}" for m, k in errors[:3])
        return Verdict(ok, ok, ok, got, conf, rc is None, not ok)
    if rc is None:
        return Verdict(False, False, False, "no root cause", None, True, False)
    module = rc.get("module")
    phase = (diagnosis.get("run") or {}).get("phase") or {}
    for part in phase.get("models") or []:  # a phase's model names its modules "<model>.<name>" in a store of several
        if isinstance(module, str) and module.startswith(f"{part}."):
            module = module[len(part) + 1:]
    pair = (module, rc.get("kind"))
    right = any((e["module"], e["kind"]) == pair for e in expected)
    module_right = any(e["module"] == pair[0] for e in expected)
    kind_right = any(e["kind"] == pair[1] for e in expected)
    return Verdict(right, module_right, kind_right, f"{pair[0]}/{pair[1]}", conf, False, False)


def ece_bins(scored: list[tuple[float, bool]]) -> tuple[float, list[dict[str, Any]]]:
    """Expected calibration error of (confidence, right) pairs over BINS equal-width bins (the top one closed), and
    the bins."""
    bins = []
    ece = 0.0
    for b in range(BINS):
        lo, hi = b / BINS, (b + 1) / BINS
        inside = [(c, r) for c, r in scored if (lo <= c < hi) or (b == BINS - 1 and c == 1.0)]
        if not inside:
            continue
        conf = sum(c for c, _ in inside) / len(inside)
        acc = sum(r for _, r in inside) / len(inside)
        ece += len(inside) / len(scored) * abs(conf - acc)
        bins.append({"from": lo, "to": hi, "n": len(inside), "confidence": round(conf, 3), "accuracy": round(acc, 3)})
    return ece, bins


def calibration(verdicts: list[Verdict]) -> dict[str, Any]:
    """Expected calibration error over BINS equal-width confidence bins, and precision at >= HIGH_CONFIDENCE.

    Only answers with a confidence count (a root cause was given); correctness is `right`.
    """
    scored = [(v.confidence, v.right) for v in verdicts if v.confidence is not None]
    if not scored:
        return {"answers": 0, "ece": None, "high_confidence": 0, "high_confidence_precision": None, "bins": []}
    ece, bins = ece_bins(scored)
    high = [r for c, r in scored if c >= HIGH_CONFIDENCE]
    return {"answers": len(scored), "ece": round(ece, 4), "high_confidence": len(high),
            "high_confidence_precision": round(sum(high) / len(high), 4) if high else None, "bins": bins}


def _frac(k: int, n: int) -> dict[str, Any]:
    return {"right": k, "n": n, "accuracy": round(k / n, 4) if n else None}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate scored runs (dicts with half, why, family, healthy and a 'verdict' Verdict)."""
    def group(key) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for r in runs:
            out.setdefault(str(key(r)), []).append(r)
        return {k: _frac(sum(x["verdict"].right for x in v), len(v)) for k, v in sorted(out.items())}

    faulty = [r for r in runs if not r["healthy"]]
    healthy = [r for r in runs if r["healthy"]]
    vs = [r["verdict"] for r in runs]
    return {
        "runs": len(runs),
        "all": _frac(sum(v.right for v in vs), len(vs)),
        "faulty": _frac(sum(r["verdict"].right for r in faulty), len(faulty)),
        "faulty_module_only": _frac(sum(r["verdict"].module_right for r in faulty), len(faulty)),
        "faulty_kind_only": _frac(sum(r["verdict"].kind_right for r in faulty), len(faulty)),
        "healthy": _frac(sum(r["verdict"].right for r in healthy), len(healthy)),
        "false_alarms": sum(r["verdict"].false_alarm for r in healthy),
        "no_root_cause_on_faulty": sum(r["verdict"].no_root_cause for r in faulty),
        "failed_runs": sum(bool(r["verdict"].reason) for r in runs),
        "by_half": group(lambda r: r["half"]),
        "by_why": group(lambda r: r["why"]),
        "by_family": group(lambda r: r["family"]),
        "calibration": calibration(vs),
    }


# ---------------------------------------------------------------------------------------------- selecting


def _stable(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def stratum(entry: dict[str, Any]) -> str:
    return "healthy" if entry["healthy"] else f"why{entry['why']}"


def sample(entries: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """A fixed, stratified sample of n runs: every stratum (healthy, and each Why class) is represented,
    the rest shared in proportion to the strata's sizes, members chosen by a hash of their id."""
    if n >= len(entries):
        return list(entries)
    strata: dict[str, list[dict[str, Any]]] = {}
    for e in sorted(entries, key=lambda e: _stable(e["id"])):
        strata.setdefault(stratum(e), []).append(e)
    keys = sorted(strata)
    take = {k: min(len(strata[k]), 1 if n < 2 * len(keys) else 2) for k in keys}
    left = n - sum(take.values())
    total = sum(len(strata[k]) - take[k] for k in keys)
    if left > 0 and total > 0:
        shares = {k: (len(strata[k]) - take[k]) * left / total for k in keys}
        for k in keys:
            take[k] += int(shares[k])
        rest = n - sum(take.values())
        for k in sorted(keys, key=lambda k: -(shares[k] - int(shares[k]))):
            if rest <= 0:
                break
            if take[k] < len(strata[k]):
                take[k] += 1
                rest -= 1
    picked = [e for k in keys for e in strata[k][: take[k]]]
    return sorted(picked, key=lambda e: e["id"])[:n]


def select(split: str = "dev", k: str = "", n_sample: int | None = None, manifest: dict | None = None) -> list[dict[str, Any]]:
    """The kept manifest entries of a split ('dev', 'heldout' or 'all'), filtered by id substring, sampled."""
    manifest = manifest or zoo.load_manifest()
    es = [e for e in manifest["mutants"] if e["kept"] and (split == "all" or e["half"] == split) and k in e["id"]]
    return sample(es, n_sample) if n_sample else es


def sources(entries: list[dict[str, Any]]) -> dict[str, str]:
    """The scripts of the selected entries, generated again and checked against the manifest's digests."""
    wanted = {e["id"]: e for e in entries}
    out = {}
    for _, m in zoo.generate_all():
        if m.id in wanted:
            if zoo.digest(m.source) != wanted[m.id]["sha"]:
                raise SystemExit(f"{m.id}: the generated script differs from manifest.json's; run manifest.py again")
            out[m.id] = m.source
    missing = sorted(set(wanted) - set(out))
    if missing:
        raise SystemExit(f"not generated any more (run manifest.py again): {missing[:5]}")
    return out


# ---------------------------------------------------------------------------------------------- running


def run_one(entry: dict[str, Any], source: str, workdir: Path) -> dict[str, Any]:
    """Trace and diagnose one script; returns the entry with its diagnosis (or failure) and verdict."""
    t0 = time.perf_counter()
    script = workdir / f"{entry['id']}.py"
    store = workdir / f"{entry['id']}.db"
    script.write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "gradsight"]
    diagnosis, failure = None, ""
    try:
        trace = subprocess.run([*cmd, "trace", str(script), "--output", str(store), "--overwrite", "--quiet"], env=env, cwd=workdir,
                               capture_output=True, text=True, timeout=TRACE_TIMEOUT_S)
        if not store.exists():
            failure = f"trace wrote no store (exit {trace.returncode}): {_tail(trace.stderr)}"
        else:
            diag = subprocess.run([*cmd, "diagnose", str(store), "--json"], env=env, cwd=workdir,
                                  capture_output=True, text=True, timeout=DIAGNOSE_TIMEOUT_S)
            if diag.returncode != 0:
                failure = f"diagnose failed (exit {diag.returncode}): {_tail(diag.stderr)}"
            else:
                try:
                    diagnosis = json.loads(diag.stdout)
                except json.JSONDecodeError as e:
                    failure = f"diagnose printed no JSON ({e}): {_tail(diag.stdout)}"
    except subprocess.TimeoutExpired as e:
        failure = f"timed out after {e.timeout} s"
    except OSError as e:
        failure = f"could not run gradsight: {e}"
    verdict = score(entry["expected"], diagnosis, failure)
    return {**entry, "verdict": verdict, "diagnosis": diagnosis, "seconds": round(time.perf_counter() - t0, 1)}


def _tail(text: str, n: int = 300) -> str:
    text = (text or "").strip().replace("\n", " | ")
    return text[-n:]


def expected_words(entry: dict[str, Any]) -> str:
    if entry["expected"] is None:
        return "healthy"
    first = entry["expected"][0]
    more = len(entry["expected"]) - 1
    return f"{first['module']}/{first['kind']}" + (f" (+{more})" if more else "")


def print_line(r: dict[str, Any], width: int) -> None:
    v: Verdict = r["verdict"]
    conf = "  -  " if v.confidence is None else f"{v.confidence:.2f}"
    mark = "right" if v.right else ("FALSE ALARM" if v.false_alarm else ("FAILED" if v.reason else "wrong"))
    print(f"{r['id']:<{width}} expected {expected_words(r):<48} got {v.got:<44} conf {conf}  {mark}"
          + (f"  [{v.reason[:160]}]" if v.reason else "") + f"  ({r['seconds']:.0f} s)", flush=True)


def print_summary(s: dict[str, Any], seconds: float) -> None:
    def pct(f):
        return "  n/a" if f["accuracy"] is None else f"{f['accuracy']:6.1%}"

    print()
    print(f"runs {s['runs']}: right {s['all']['right']}/{s['all']['n']} ({pct(s['all'])})")
    print(f"  faulty  root cause (module and kind) {s['faulty']['right']}/{s['faulty']['n']} ({pct(s['faulty'])});"
          f" module only {pct(s['faulty_module_only'])}; kind only {pct(s['faulty_kind_only'])}")
    print(f"  healthy {s['healthy']['right']}/{s['healthy']['n']} ({pct(s['healthy'])}); false alarms {s['false_alarms']}")
    print(f"  no root cause on faulty runs: {s['no_root_cause_on_faulty']}; failed runs (no store / no diagnosis): {s['failed_runs']}")
    print("  by half:   " + "; ".join(f"{k} {v['right']}/{v['n']} ({pct(v)})" for k, v in s["by_half"].items()))
    print("  by Why class:")
    for k, v in s["by_why"].items():
        print(f"    {k} {WHY_NAMES.get(int(k), ''):<26} {v['right']:4d}/{v['n']:<4d} {pct(v)}")
    print("  by operator family:")
    for k, v in s["by_family"].items():
        print(f"    {k:<22} {v['right']:4d}/{v['n']:<4d} {pct(v)}")
    c = s["calibration"]
    ece = "n/a" if c["ece"] is None else f"{c['ece']:.3f}"
    prec = "n/a" if c["high_confidence_precision"] is None else f"{c['high_confidence_precision']:.1%}"
    print(f"  calibration: ECE {ece} over {c['answers']} answers with a confidence; "
          f"confidence >= {HIGH_CONFIDENCE}: {c['high_confidence']} answers, precision {prec}")
    print(f"  total time {seconds:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", choices=["dev", "heldout", "all"], default="dev")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sample", type=int, default=None, help="a fixed stratified sample of N runs")
    ap.add_argument("-k", default="", help="only runs whose id contains this")
    ap.add_argument("--json", default=None, help="also write every verdict and the summary to this file")
    ap.add_argument("--keep", default=None, help="keep the scripts and stores in this folder")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    entries = select(args.split, args.k, args.sample)
    if not entries:
        print("no runs selected")
        return 1
    srcs = sources(entries)
    print(f"{len(entries)} runs of split {args.split} ({sum(e['healthy'] for e in entries)} healthy), {args.jobs} jobs", flush=True)
    width = max(len(e["id"]) for e in entries)
    with tempfile.TemporaryDirectory(prefix="faultzoo-") as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        results = []
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for r in pool.map(lambda e: run_one(e, srcs[e["id"]], workdir), entries):
                print_line(r, width)
                results.append(r)
    seconds = time.perf_counter() - t0
    summary = summarize(results)
    print_summary(summary, seconds)
    if args.json:
        doc = {"schema": "faultzoo.results/1", "split": args.split, "sample": args.sample, "k": args.k, "seconds": round(seconds, 1),
               "summary": summary,
               "runs": [{"id": r["id"], "half": r["half"], "why": r["why"], "family": r["family"], "healthy": r["healthy"],
                         "expected": r["expected"], "seconds": r["seconds"], "verdict": asdict(r["verdict"]),
                         "root_cause": (r["diagnosis"] or {}).get("root_cause")} for r in results]}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
