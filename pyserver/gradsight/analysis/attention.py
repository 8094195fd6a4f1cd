"""Attention that collapses: heads that put (nearly) all their weight on one key.

From the attention distributions measured on measured steps: each head's entropy (over the log of the keys
it may see), its largest weight, and how many keys its mask leaves each query. At initialisation attention is
close to uniform (queries and keys are random, their logits small): a head concentrated from the first steps
is a fault of the logits' scale (multiplied where they should be divided, query/key weights too large); a
mask that leaves each query one key is a fault of the mask. Sharp attention that training learns while the
loss falls is not: a head whose entropy collapses over the run counts only when the loss stops falling.
"""

from __future__ import annotations

import math

import numpy as np

from .. import kinds
from ..thresholds import Thresholds
from .data import RunData
from .findings import Finding
from .losscurve import LossCurve

MIN_KEYS = 4  # fewer keys make one-hot attention likely by chance
EARLY_ENTROPY = 0.5  # attention this concentrated at the first measured step did not come from training


def _mean(values: object) -> float:
    return float(np.mean(values)) if isinstance(values, list) and values else math.nan


def _within(row: dict[str, object]) -> object:
    """Each head's entropy over the keys it may see (over all keys in stores from before it was recorded)."""
    return row.get("entropy_valid") or row.get("entropy")


def inverted(kept: float, hidden: float) -> bool:
    """A mask that keeps one repeated item (the padding: 90% or more of what it keeps) and hides varied ones (no item
    half of them): it is inverted."""
    return kept >= 0.9 and hidden < 0.5


def keeps_only_padding(row: dict[str, object]) -> bool:
    """An attention observation whose mask leaves it only the padding (:func:`inverted`)."""
    kept, hidden = row.get("kept_mode_share"), row.get("hidden_mode_share")
    return isinstance(kept, (int, float)) and isinstance(hidden, (int, float)) and inverted(kept, hidden)


def masks(d: RunData) -> list[Finding]:
    """The model's attention_mask, as its calls gave it: one that hides every token of some sequences, or one that
    keeps a single repeated id (the padding) and hides the varied tokens (the text): inverted."""
    rows = [(o.step, o.data) for o in d.observed("mask")]
    if not rows:
        return []
    step = rows[0][0]
    empty = float(np.median([float(r.get("empty_rows") or 0.0) for _, r in rows]))
    kept = [float(v) for _, r in rows if isinstance(v := r.get("kept_mode_share"), (int, float))]
    hidden = [float(v) for _, r in rows if isinstance(v := r.get("hidden_mode_share"), (int, float))]
    upside_down = bool(kept and hidden and inverted(float(np.median(kept)), float(np.median(hidden))))
    if empty < 0.05 and not upside_down:
        return []
    what = (f"it hides every token of {empty:.0%} of the sequences" if empty >= 0.05 else "")
    if upside_down:
        what += ("; " if what else "") + (f"the tokens it keeps are {np.median(kept):.0%} one repeated id (the padding) and the ones "
                                          "it hides vary (the text)")
    return [Finding("input", kinds.ATTENTION_COLLAPSE, "error",
                    f"the model's attention_mask looks inverted: {what} (1 should mark the tokens to attend to, 0 the padding)",
                    0.9, step)]


def detect(d: RunData, t: Thresholds, curve: LossCurve) -> list[Finding]:
    out: list[Finding] = masks(d)
    by_module: dict[str, list[tuple[int, dict[str, object]]]] = {}
    for o in d.observed("attention"):
        if o.module is not None and o.data.get("entropy"):
            by_module.setdefault(o.module, []).append((o.step, o.data))
    for rows in by_module.values():
        rows.sort(key=lambda r: r[0])
    # every attention layer of the model started near uniform and ended on single keys: healthy training sharpens some
    # heads and leaves others broad (the probes' healthy transformers keep at least one layer above 0.5), so a model whose
    # every layer collapsed had logits far too sharp, whether or not its loss still fell
    ends = {m: (_mean(_within(r[0][1])), _mean(_within(r[-1][1]))) for m, r in by_module.items() if len(r) >= 2}
    everywhere = bool(ends) and all(a >= 0.5 and b < t.attention_collapsed_entropy for a, b in ends.values())
    for module, rows in by_module.items():
        step, first = rows[0]
        count = first.get("keys")
        keys = int(count) if isinstance(count, (int, float)) else 0
        if keys < MIN_KEYS:
            continue
        valid = _mean(first.get("valid_keys"))
        within = _within(first)
        heads = np.array(within if isinstance(within, list) else [], dtype=np.float64)
        tops = np.array(first.get("maxprob") or [], dtype=np.float64)
        if keeps_only_padding(first):
            kept = float(first["kept_mode_share"])  # type: ignore[arg-type]
            out.append(Finding(module, kinds.ATTENTION_COLLAPSE, "error",
                               f"from step {step} its mask lets it attend only to one repeated input item ({kept:.0%} of the keys it may "
                               "see: the padding) and hides the varied ones (the tokens or items): the padding mask is inverted", 0.9, step))
            continue
        if math.isfinite(valid) and valid <= 1.5:
            out.append(Finding(module, kinds.ATTENTION_COLLAPSE, "error",
                               f"its mask leaves each query {valid:.2g} key{'s' if valid >= 1.5 else ''} of {keys} (from step {step}): every head "
                               "attends to one key, whatever the input", 0.95, step))
            continue
        if len(heads) and float(heads.mean()) < EARLY_ENTROPY:
            worst = int(np.argmin(heads))
            out.append(Finding(module, kinds.ATTENTION_COLLAPSE, "error",
                               f"already at step {step} its heads put most weight on few keys: entropy {float(heads.mean()):.2g} of the uniform "
                               f"one (head {worst}: {heads[worst]:.2g}" + (f", largest weight {tops[worst]:.2f}" if len(tops) > worst else "")
                               + "), where attention starts near uniform: the attention logits are far too large (scaled up, or "
                               "query/key weights too large)", min(1.0, 0.6 + 0.8 * (EARLY_ENTROPY - float(heads.mean()))), step))
            continue
        if everywhere and module in ends:
            start, end = ends[module]
            out.append(Finding(module, kinds.ATTENTION_ENTROPY_COLLAPSE, "error",
                               f"its attention entropy fell from {start:.2g} to {end:.2g} of the uniform one over the keys it may see "
                               f"(steps {rows[0][0]}-{rows[-1][0]}), as in every attention layer of the model: the heads attend to single "
                               "keys (the attention logits are too sharp: a scale multiplied where it should divide, say)", 0.75, rows[-1][0]))
            continue
        if len(rows) >= 3:
            start, end = _mean(rows[0][1].get("entropy")), _mean(rows[-1][1].get("entropy"))
            poor = curve.not_decreasing or (math.isfinite(curve.head) and curve.head > 0 and curve.tail > 0.5 * curve.head)
            if start >= 0.5 and end < t.attention_collapsed_entropy and poor:
                out.append(Finding(module, kinds.ATTENTION_ENTROPY_COLLAPSE, "error",
                                   f"its attention entropy fell from {start:.2g} to {end:.2g} of the uniform one (steps {rows[0][0]}-{rows[-1][0]}) "
                                   "while the loss stopped falling: the heads collapsed onto single keys", 0.8, rows[-1][0]))
    return out
