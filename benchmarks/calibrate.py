"""Fit the root cause's calibration (``pyserver/gradsight/analysis/calibration.py``) on labelled runs.

    python benchmarks/faultzoo/run.py --split dev --jobs 2 --keep ZOO        # trace the development half once
    python benchmarks/fault_probes/run.py --jobs 2 --keep PROBES              # and the fault probes
    python benchmarks/calibrate.py --zoo ZOO --probes PROBES [--write]

Every kept store is diagnosed with the working tree's analysis; each answer that names a root cause gives
(tier, raw score, right or wrong). The fit is a logistic regression of rightness on logit(score) with an
intercept per tier, the intercepts pulled towards their mean (a tier with few answers borrows from the rest).
Only the development half and the probes are read: the held-out half measures the result. Prints the ECE of the
raw scores and of the fit, in sample and leaving each source out in turn (fit on the others, scored on it: how
the map holds on scripts it was not fitted on); ``--write`` saves the coefficients to calibration.toml.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "faultzoo"), str(HERE.parent / "pyserver")]

from rediagnose import diagnose  # noqa: E402
from run import ece_bins, score, select  # noqa: E402

from gradsight.analysis import calibration as cal  # noqa: E402

RIDGE = 2.0  # pull of each tier's intercept towards their mean
SHRINK = 0.05  # a weak pull of every coefficient towards 0 (a tier whose answers are all right stays finite)
Answer = tuple[str, int, float, bool]  # (source, tier, raw score, right)


def _probe_entries() -> list[dict]:
    spec = importlib.util.spec_from_file_location("probes_run", HERE / "fault_probes" / "run.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.entries([], "")


def answers(zoo: Path | None, probes: Path | None) -> list[Answer]:
    runs: list[tuple[str, Path, list | None]] = []
    if zoo is not None:
        runs += [("dev", zoo / f"{e['id']}.db", e["expected"]) for e in select("dev")]
    if probes is not None:
        runs += [(e["half"], probes / e["half"] / f"{Path(e['id']).name}.db", e["expected"]) for e in _probe_entries()]
    out: list[Answer] = []
    for source, store, expected in runs:
        if not store.exists():
            continue
        d, failure = diagnose(store)
        v = score(expected, d, failure)
        basis = (d or {}).get("calibration")
        if v.confidence is None or not basis or basis.get("score") is None:
            continue
        out.append((source, int(basis["tier"]), float(basis["score"]), bool(v.right)))
    return out


def fit(rows: list[Answer]) -> cal.Fit:
    tiers = sorted({t for _, t, _, _ in rows})
    col = {t: i for i, t in enumerate(tiers)}
    x = np.array([cal.logit(s) for _, _, s, _ in rows])
    y = np.array([float(r) for *_, r in rows])
    onehot = np.zeros((len(rows), len(tiers)))
    onehot[np.arange(len(rows)), [col[t] for _, t, _, _ in rows]] = 1.0
    design = np.column_stack([onehot, x])
    k = len(tiers)
    theta = np.zeros(k + 1)
    theta[-1] = 1.0
    for _ in range(100):  # Newton's method on the penalised log-likelihood
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        a = theta[:k]
        grad = design.T @ (p - y)
        grad[:k] += RIDGE * (a - a.mean())
        grad += SHRINK * theta
        hess = design.T @ (design * (p * (1 - p))[:, None])
        hess[:k, :k] += RIDGE * (np.eye(k) - 1.0 / k)
        hess += SHRINK * np.eye(k + 1)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-9:
            break
    a = theta[:k]
    return cal.Fit(float(theta[-1]), {t: float(a[col[t]]) for t in tiers}, float(a.mean()))


def ece(pairs: list[tuple[float, bool]]) -> float:
    return ece_bins(pairs)[0]  # (the zoo's measure)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", type=Path, help="the development half's stores (run.py --split dev --keep)")
    ap.add_argument("--probes", type=Path, help="the fault probes' stores (fault_probes/run.py --keep)")
    ap.add_argument("--write", action="store_true", help="save the fit to " + str(cal.TABLE))
    args = ap.parse_args()
    rows = answers(args.zoo, args.probes)
    if len(rows) < 50:
        print(f"only {len(rows)} answers with a root cause: too few to fit", file=sys.stderr)
        return 1
    by_tier: dict[int, list[bool]] = defaultdict(list)
    for _, t, _, r in rows:
        by_tier[t].append(r)
    print(f"{len(rows)} answers; right by tier: " + ", ".join(f"{t}: {sum(v)}/{len(v)}" for t, v in sorted(by_tier.items())))
    f = fit(rows)
    print(f"fit: slope {f.slope:.3f}, intercepts " + ", ".join(f"{t}: {a:.3f}" for t, a in sorted(f.intercepts.items())))
    raw = [(s, r) for _, _, s, r in rows]
    fitted = [(cal.calibrated(t, s, f), r) for _, t, s, r in rows]
    print(f"in sample: ECE raw {ece(raw):.3f}, calibrated {ece(fitted):.3f}")
    sources = sorted({src for src, *_ in rows})
    held: list[tuple[float, bool]] = []
    for src in sources:  # leave one source out: fitted without it, scored on it
        rest = [r for r in rows if r[0] != src]
        mine = [r for r in rows if r[0] == src]
        if not rest:
            continue
        g = fit(rest)
        held += [(cal.calibrated(t, s, g), r) for _, t, s, r in mine]
    if held:
        print(f"each source left out in turn ({len(sources)} sources): ECE calibrated {ece(held):.3f} (raw {ece(raw):.3f})")
    if args.write:
        lines = ["# The root cause's calibration (analysis/calibration.py), written by benchmarks/calibrate.py",
                 f"# fitted on {len(rows)} answers: " + ", ".join(sources),
                 f"slope = {f.slope:.6f}", f"default = {f.default:.6f}", "", "[intercepts]",
                 *(f'"{t}" = {a:.6f}' for t, a in sorted(f.intercepts.items()))]
        cal.TABLE.write_text("\n".join(lines) + "\n")
        print("written:", cal.TABLE)
    if not all(math.isfinite(v) for v in [f.slope, *f.intercepts.values()]):
        print("the fit did not converge", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
