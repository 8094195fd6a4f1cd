"""Normalisation layers whose eps swamps their input's variance, so that they do not normalise.

A norm divides by sqrt(var + eps): with eps far above the variance it divides by about sqrt(eps) whatever the
input, and passes the input on shrunk (by std / sqrt(eps)) instead of at unit scale. Each such layer in a chain
shrinks the signal, and the gradient back through it, again (``BatchNorm2d(c, 0.99, 1e-3)`` passes 0.99 as
eps where a momentum was meant: the second positional argument is eps). Read off each norm's recorded eps
and the output of the module run just before it, on the first measured step.
"""

from __future__ import annotations

import math

import numpy as np

from .. import kinds
from .data import NORMS, RunData
from .findings import Finding
from .losscurve import LossCurve

SWAMPED = 10.0  # eps this many times the input's variance: the norm divides by ~sqrt(eps)
SHRUNK = 0.5  # and its output's std stays below this (a norm that normalises gives ~1)
SLOW = 0.4  # a loss that ends above this share of its start made poor progress


def detect(d: RunData, curve: LossCurve) -> list[Finding]:
    head, tail = curve.head, curve.tail
    poor = curve.not_decreasing or (math.isfinite(head) and math.isfinite(tail) and head > 0 and tail > SLOW * head)
    steps, std = d.metric("act_std")
    if not poor or not std.size:
        return []
    rank = d.forward_rank()
    parents = {m.parent for m in d.modules if m.parent is not None}
    ran = sorted([m for m in d.modules if m.forward_order is not None and m.name not in parents], key=lambda m: rank[m.id])
    first = std[0].astype(np.float64)
    swamped: list[tuple[str, float, float, float]] = []  # (norm, eps, input std, output std)
    for before, m in zip(ran, ran[1:]):
        eps = (m.config or {}).get("eps")
        if m.type not in NORMS or not isinstance(eps, (int, float)) or eps <= 0:
            continue
        s_in, s_out = float(first[before.id]), float(first[m.id])
        if math.isfinite(s_in) and math.isfinite(s_out) and eps > SWAMPED * s_in ** 2 and s_out < SHRUNK:
            swamped.append((m.name, float(eps), s_in, s_out))
    if not swamped:
        return []
    name, eps, s_in, s_out = swamped[0]
    more = f"; {len(swamped) - 1} more norm layers after it do the same" if len(swamped) > 1 else ""
    return [Finding(name, kinds.VANISHING_GRADIENT, "error",
                    f"{name!r} has eps={eps:.3g}, {eps / max(s_in ** 2, 1e-30):.3g}x the variance of its input (std {s_in:.3g}): "
                    f"it divides by about sqrt(eps), so it does not normalise, and its output's std is {s_out:.3g} instead "
                    f"of about 1{more}; the signal and the gradient shrink at each such layer, and the loss made poor "
                    f"progress ({head:.4g} -> {tail:.4g})", 0.85 if len(swamped) > 1 else 0.7, int(steps[0]), mechanism=True)]
