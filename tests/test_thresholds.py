"""Thresholds are named defaults a user overrides in pyproject.toml or gradsight.toml; bad values are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradsight.store import RunStore
from gradsight.thresholds import ThresholdError, Thresholds, load

from .conftest import FAULTS, run_gradsight


def test_defaults_are_the_published_ones() -> None:
    t = Thresholds()
    assert (t.vanishing_mean_grad, t.vanishing_ratio, t.exploding_ratio, t.dead_grad_frac) == (1e-7, 1e-3, 70.0, 0.7)
    assert (t.saturation_frac, t.update_ratio_high, t.update_ratio_low) == (0.5, 0.1, 1e-4)
    assert (t.layer_grad_norm, t.dead_units_frac, t.loss_spike_factor, t.loss_spike_window) == (50.0, 0.5, 3.0, 10)


def test_pyproject_and_gradsight_toml(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.gradsight.thresholds]\nlayer_grad_norm = 500\nloss_spike_window = 20\n")
    sub = tmp_path / "src"
    sub.mkdir()
    t = load(sub)  # found in a parent folder
    assert t.layer_grad_norm == 500.0 and t.loss_spike_window == 20 and isinstance(t.loss_spike_window, int)
    (sub / "gradsight.toml").write_text("[thresholds]\ndead_units_frac = 0.5\n")
    assert load(sub).dead_units_frac == 0.5 and load(sub).layer_grad_norm == 50.0  # the nearest file wins
    (sub / "gradsight.toml").write_text("[thresholds]\nlayer_grad_nrm = 1\n")
    with pytest.raises(ThresholdError, match="unknown threshold 'layer_grad_nrm'"):
        load(sub)
    (sub / "gradsight.toml").write_text("[thresholds]\nlayer_grad_norm = 'high'\n")
    with pytest.raises(ThresholdError, match="must be a number"):
        load(sub)


def test_trace_uses_the_projects_thresholds(tmp_path: Path) -> None:
    (tmp_path / "gradsight.toml").write_text("[thresholds]\nlayer_grad_norm = 1e12\nglobal_grad_norm = 1e12\nloss_spike_factor = 1e12\n")
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", "grad_explode", "--at", "10", "--steps", "20", "--output", str(store), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with RunStore(store) as run:
        assert run.events("trigger") == []  # the explosion stays under the raised limits
        assert run.run()["settings"]["thresholds"]["layer_grad_norm"] == 1e12
    (tmp_path / "gradsight.toml").write_text("[thresholds]\nbogus = 1\n")
    proc = run_gradsight("trace", str(FAULTS), "--output", str(store), cwd=tmp_path)
    assert proc.returncode == 2 and "unknown threshold 'bogus'" in proc.stderr
