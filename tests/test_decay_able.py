"""Weight decay is named only when it can take what the weights lost (traced for real, on a fault probe's script).

A graph attention network whose mask is inverted makes poor progress while Adam's steps shrink most layers'
weights; its coupled decay (5e-4) is about 4% of the gradient's size, so the gradient, not the decay, shrank them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .conftest import ROOT, run_gradsight

PROBE = ROOT / "benchmarks" / "fault_probes" / "set_o" / "f10_gat_mask_inverted.py"


def test_a_small_coupled_decay_under_a_shrinking_gradient_is_not_the_cause(tmp_path: Path) -> None:
    script = tmp_path / PROBE.name
    shutil.copy(PROBE, script)
    store = tmp_path / "run.db"
    traced = run_gradsight("trace", str(script), "--output", str(store), "--quiet", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr[-2000:]
    out = run_gradsight("diagnose", str(store), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout)
    assert not [f for f in d["findings"] if f["kind"] == "weight_decay_too_high" and f["severity"] == "error"], d["findings"]
    assert (d["root_cause"] or {}).get("kind") != "weight_decay_too_high", d["evidence"]
