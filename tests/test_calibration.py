"""The root cause's calibration map (analysis/calibration.py): a probability, monotone in the raw score, per tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradsight.analysis import calibration as cal


def test_the_fitted_table_maps_scores_to_probabilities_in_order() -> None:
    f = cal.fit()
    assert f is not None and f.slope > 0
    for tier in range(7):
        values = [cal.calibrated(tier, s / 20) for s in range(21)]
        assert all(cal.FLOOR <= v <= cal.CEILING for v in values)
        assert values == sorted(values), tier  # a higher score is never less likely right


def test_without_a_table_the_score_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cal, "TABLE", tmp_path / "missing.toml")
    cal.fit.cache_clear()
    try:
        assert cal.fit() is None
        assert cal.calibrated(3, 0.42) == 0.42
        (tmp_path / "missing.toml").write_text("slope = 'not a number'\n")
        cal.fit.cache_clear()
        assert cal.fit() is None  # a damaged table is no table, never an error in a diagnosis
    finally:
        cal.fit.cache_clear()


def test_an_unseen_tier_takes_the_mean_intercept() -> None:
    f = cal.Fit(1.0, {0: 2.0}, 0.0)
    assert cal.calibrated(9, 0.5, f) == pytest.approx(0.5)
    assert cal.calibrated(0, 0.5, f) > 0.85
