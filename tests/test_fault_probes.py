"""Fault probes written apart from the zoo and the rules (benchmarks/fault_probes), traced and diagnosed for real:
one per way of failing that the probes taught the diagnosis, so that each mechanism stays. The whole set is
measured by ``benchmarks/fault_probes/run.py``."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT

_spec = importlib.util.spec_from_file_location("fault_probes_run", ROOT / "benchmarks" / "fault_probes" / "run.py")
assert _spec is not None and _spec.loader is not None
probes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probes)

CASES = {
    "set_a/b01_cnn": "healthy: 80% of a hidden layer's units dead while the loss falls steadily",
    "set_a/h05_bce_sum": "bait: a summed loss under AdamW, whose steps do not scale with the gradient",
    "set_a/f20_weight_decay": "AdamW decay with a half-life shorter than the run",
    "set_a/f02_shuffled_images": "labels with no signal: the units die after the loss was already stuck",
    "set_b/f01_lstm_adam_lr": "Adam at lr 1: the loss ends far above where it began",
    "set_a/f12_nan_rows": "NaN rows in the data: non-finite gradients are not missing ones",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    entries = [e for e in probes.entries([], "") if e["id"] in CASES]
    assert {e["id"] for e in entries} == set(CASES)
    keep: Path = tmp_path_factory.mktemp("probes")
    with ThreadPoolExecutor(2) as pool:
        return {r["id"]: r for r in pool.map(lambda e: probes.trace_one(e, keep), entries)}


@pytest.mark.parametrize("probe", sorted(CASES))
def test_probe_is_diagnosed_right(runs: dict[str, dict[str, Any]], probe: str) -> None:
    r = runs[probe]
    v = r["verdict"]
    assert v.right, f"{probe} ({CASES[probe]}): expected {r['expected'] or 'healthy'}, got {v.got} {v.reason}"
