"""The root cause's confidence: how often an answer given by the same rule, with the same score, was right on runs
whose fault is known.

``rootcause.find`` scores its choice (the finding's strength, its rule's tier weight, its rivals). That score
orders answers but is no probability: on the fault zoo's development half, answers scored 0.6 by the forward-pass
rules were right 97 times in 100, while answers of the vanishing-gradient rules scored alike were right less often.
The map is Platt scaling with an intercept per tier, ``p = 1 / (1 + exp(-(a[tier] + b * logit(score))))``, fitted
by ``benchmarks/calibrate.py`` on labelled runs: the fault zoo's development half and the fault probes, never the
held-out half. Its coefficients are in ``calibration.toml`` beside this module; without them, the score is kept.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TABLE = Path(__file__).with_name("calibration.toml")
FLOOR, CEILING = 0.02, 0.99  # a calibrated answer is never certain either way
EPS = 1e-3  # scores are clipped to [EPS, 1 - EPS] before the logit


@dataclass(frozen=True)
class Fit:
    slope: float
    intercepts: dict[int, float]  # per tier
    default: float  # the intercept of a tier the fit did not see


@cache
def fit() -> Fit | None:
    try:
        raw = tomllib.loads(TABLE.read_text())
        return Fit(float(raw["slope"]), {int(k): float(v) for k, v in raw["intercepts"].items()}, float(raw["default"]))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError):
        return None


def logit(score: float) -> float:
    s = min(max(score, EPS), 1 - EPS)
    return math.log(s / (1 - s))


def calibrated(tier: int, score: float, table: Fit | None = None) -> float:
    """The probability that a root cause of this tier and raw score is right (the score itself without a fit)."""
    f = table if table is not None else fit()
    if f is None:
        return score
    z = f.intercepts.get(tier, f.default) + f.slope * logit(score)
    return min(max(1.0 / (1.0 + math.exp(-z)), FLOOR), CEILING)
