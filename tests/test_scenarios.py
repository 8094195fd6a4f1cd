"""Every scenario of tests/scenarios, traced and diagnosed through the command line, gets the declared root cause;
healthy runs get no root cause and no error-level finding."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from diagnosis_accuracy import expected_of, run, verdict  # noqa: E402

# faults whose cause lives outside the script's own code: a fix is offered only where its target exists, so none
NO_FIX_IN_SCRIPT = {"label_noise"}  # the labels are drawn at random by a helper (_common.classification)
SCENARIOS = sorted(p for p in (ROOT / "tests" / "scenarios").glob("*.py") if not p.name.startswith("_"))


def test_the_suite_is_large_enough() -> None:
    faults = [p for p in SCENARIOS if expected_of(p) is not None]
    healthy = [p for p in SCENARIOS if expected_of(p) is None]
    assert len(faults) >= 18 and len(healthy) >= 4
    assert len({(str(e["module"]), e["kind"]) for e in map(expected_of, faults) if e}) >= 15  # distinct faults


@pytest.mark.parametrize("script", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_diagnosis(script: Path, tmp_path: Path) -> None:
    expected = expected_of(script)
    diagnosis = run(script, tmp_path)
    ok, got = verdict(expected, diagnosis)
    assert ok, f"expected {expected}, got {got}"
    if expected is not None:
        rc = diagnosis["root_cause"]
        assert 0 < rc["confidence"] <= 1 and rc["path"][0] == rc["module"]
        assert bool(diagnosis["fixes"]) != (script.stem in NO_FIX_IN_SCRIPT), [f["id"] for f in diagnosis["fixes"]]
        for f in diagnosis["fixes"]:  # every fix goes into the scenario's own script, as a patch that was checked
            assert {e["file"] for e in f["edits"]} == {str(script)}, f
    else:
        assert diagnosis["health"] >= 80
