"""A fixed stratified sample of the fault zoo's development half, traced and diagnosed for real (issue 15), and
the first fix of some of its faulty runs validated by a re-run (issue 16). The full halves are measured by
``benchmarks/faultzoo/run.py`` and ``benchmarks/faultzoo/fixes.py``; these thresholds sit below what they
measure on dev (94% right, first fix works in most faulty runs) so that a regression shows, not noise."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, run_gradsight

sys.path.insert(0, str(ROOT / "benchmarks" / "faultzoo"))

import run as zoo_run  # noqa: E402

SAMPLE = 40
MIN_RIGHT = 0.80  # of the sample; dev as a whole: 94%


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    entries = zoo_run.select("dev", n_sample=SAMPLE)
    srcs = zoo_run.sources(entries)
    work = tmp_path_factory.mktemp("zoo")
    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda e: {**zoo_run.run_one(e, srcs[e["id"]], work), "store": work / f"{e['id']}.db"}, entries))


def test_the_sample_covers_the_dev_half(sample: list[dict[str, Any]]) -> None:
    assert len(sample) == SAMPLE
    assert {r["healthy"] for r in sample} == {True, False}
    assert len({r["family"] for r in sample}) >= 6 and len({r["base"] for r in sample}) >= 8


def test_diagnosis_on_the_sample(sample: list[dict[str, Any]]) -> None:
    summary = zoo_run.summarize(sample)
    wrong = [(r["id"], r["verdict"].got, r["verdict"].reason) for r in sample if not r["verdict"].right]
    assert summary["failed_runs"] == 0, wrong
    assert summary["all"]["accuracy"] >= MIN_RIGHT, wrong
    assert summary["false_alarms"] <= 1, wrong


def test_confidence_is_the_calibrated_score_and_holds_on_the_sample(sample: list[dict[str, Any]]) -> None:
    """Each answer's confidence is its rule tier's calibration of its raw score (analysis/calibration.py, fitted on
    the dev half and the fault probes), and it tells how often such answers are right (ECE over the sample)."""
    from gradsight.analysis.calibration import calibrated, fit

    assert fit() is not None  # the fitted table ships with the package
    answered = [r for r in sample if (r["diagnosis"] or {}).get("root_cause") and (r["diagnosis"] or {}).get("calibration")]
    assert len(answered) >= 20
    for r in answered:
        basis, rc = r["diagnosis"]["calibration"], r["diagnosis"]["root_cause"]
        assert rc["confidence"] == pytest.approx(calibrated(basis["tier"], basis["score"]), abs=1e-3), r["id"]
    c = zoo_run.calibration([r["verdict"] for r in sample])
    assert c["ece"] is not None and c["ece"] <= 0.12, c["bins"]


def test_first_fixes_on_the_sample_remove_the_fault(sample: list[dict[str, Any]], tmp_path: Path) -> None:
    """The first fix of six faulty runs the diagnosis got right, applied as placed and re-run: most remove the
    fault, none breaks the script."""
    faulty = [r for r in sample if not r["healthy"] and r["verdict"].right and (r["diagnosis"] or {}).get("fixes")][:6]
    assert len(faulty) == 6
    verdicts = {}
    for r in faulty:
        first = r["diagnosis"]["fixes"][0]["id"]
        proc = run_gradsight("validate", str(r["store"]), "--fix", first, "--json", cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)["fixes"][0]
        verdicts[r["id"]] = (first, out["verdict"], out["summary"])
    assert not [v for v in verdicts.values() if v[1] == "failed"], verdicts
    assert sum(v[1] == "validated" for v in verdicts.values()) >= 5, verdicts
