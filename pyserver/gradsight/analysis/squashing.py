"""Sigmoids used as hidden activations: between two layers, not as a gate or the output.

A sigmoid passes back at most a quarter of the gradient it gets, and its outputs are all positive (not centred
on zero), so the layers before a chain of them learn slowly (Glorot and Bengio, 2010): not a failure any
gradient threshold sees at once, but a run that makes poor progress. A hidden sigmoid is an ``nn.Sigmoid``
followed in the forward pass by a layer, or a ``torch.sigmoid`` call whose output a layer is given (the
runtime follows it, on measured steps); a sigmoid whose output is multiplied with something else (a gate,
SiLU written by hand) or is the model's output feeds no layer and is not counted.
"""

from __future__ import annotations

import numpy as np

from .. import kinds
from ..thresholds import Thresholds
from .data import NORMS, RunData
from .findings import Finding
from .losscurve import LossCurve

SIGMOIDS = {"Sigmoid", "Hardsigmoid"}
MIN_HIDDEN = 2  # one sigmoid between two layers is a choice; a chain of them is what slows learning
SLOW = 0.4  # a loss that ends above this share of its start, with such a chain, made poor progress


def detect(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    head, tail = curve.head, curve.tail
    poor = curve.not_decreasing or (np.isfinite(head) and np.isfinite(tail) and head > 0 and tail > SLOW * head)
    if not poor:
        return []
    rank = d.forward_rank()
    parents = {m.parent for m in d.modules if m.parent is not None}
    ran = sorted([m for m in d.modules if m.forward_order is not None and m.name not in parents], key=lambda m: rank[m.id])
    layers = [m for m in ran if m.own_params > 0]
    feeding: list[tuple[int, str]] = []  # (rank of the layer a hidden sigmoid feeds, how it is written)
    for k, m in enumerate(ran):
        if m.type in SIGMOIDS and k + 1 < len(ran) and ran[k + 1].own_params > 0:
            feeding.append((rank[ran[k + 1].id], f"{m.name!r} ({m.type})"))
    seen: set[str] = set()
    for o in d.observed("sigmoid"):
        feeds = o.data.get("feeds")
        if not isinstance(feeds, str) or feeds not in d.index or feeds in seen:
            continue
        seen.add(feeds)
        at = rank[d.index[feeds]]
        # a module without parameters (a dropout) passes it on to the next layer; with none after, it is the output
        nxt = next((m for m in ran if rank[m.id] >= at and m.own_params > 0), None)
        if nxt is not None:
            feeding.append((rank[nxt.id], f"torch.sigmoid before {feeds!r}"))
    if len(feeding) < MIN_HIDDEN:
        return []
    feeding.sort()
    first = feeding[0][0]
    # the layer whose outputs the first hidden sigmoid squashes: the nearest layer before it that computes (not a norm)
    before = [m for m in layers if rank[m.id] < first and m.type not in NORMS]
    if not before:
        return []
    where = before[-1].name
    return [Finding(where, kinds.SATURATION, "error",
                    f"{len(feeding)} hidden layers end in a sigmoid ({', '.join(w for _, w in feeding[:3])}"
                    f"{' ...' if len(feeding) > 3 else ''}): each passes back at most 1/4 of the gradient and gives only "
                    f"positive outputs, so the layers from {where!r} on learn slowly, and the loss made poor progress "
                    f"({head:.4g} -> {tail:.4g}); a ReLU or GELU between layers learns faster", 0.7, int(d.steps["step"][0]))]
