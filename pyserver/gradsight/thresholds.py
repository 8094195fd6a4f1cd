"""Named, documented thresholds shared by the runtime's triggers and the analysis.

Defaults start from published ones: mean |grad| < 1e-7 vanishing (SageMaker
Debugger, DeepDiagnosis); first/last layer grad-norm ratio < 1e-3 vanishing and
> 70 exploding, >= 70% zero gradients a dying ReLU (AUTOTRAINER); > 50% of
tanh/sigmoid inputs beyond +-5 saturated (DeepDiagnosis); update ratio
mean|dW| / mean|W| > 0.1 too large, < 1e-4 too small (MindInsight); layer grad
norm > 50 exploding, 30% dead units, loss 3x its 10-step mean a spike.

A user overrides any of them in ``[tool.gradsight.thresholds]`` of their
``pyproject.toml`` or in ``gradsight.toml`` (``[thresholds]``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    loss_spike_factor: float = 3.0  # loss above this many times its recent mean is a spike
    loss_spike_window: int = 10  # steps in that mean
    layer_grad_norm: float = 50.0  # a layer's gradient norm above this is exploding
    global_grad_norm: float = 100.0  # the whole model's gradient norm above this is exploding
    exploding_ratio: float = 70.0  # first/last layer grad-norm ratio above this: explosion towards the input
    vanishing_mean_grad: float = 1e-7  # mean |grad| below this is vanishing
    # a loss below this share of its start has little left to learn: its gradients are that much smaller than at
    # the start, so small gradients then are convergence, not vanishing
    converged_share: float = 0.05
    vanishing_ratio: float = 1e-3  # a layer's mean |grad| below this fraction of the largest layer's
    dead_grad_frac: float = 0.7  # this fraction of a layer's gradients exactly zero: dying units
    dead_units_frac: float = 0.5  # this fraction of units zero for a whole batch: dead units (30-40% is common in healthy ReLU nets)
    saturation_frac: float = 0.5  # this fraction of tanh/sigmoid inputs beyond +-saturation_level
    saturation_level: float = 5.0
    update_ratio_high: float = 0.1  # mean|dW| / mean|W| above this: steps too large
    update_ratio_low: float = 1e-4  # below this: steps too small
    update_ratio_small: float = 3e-4  # below this (a third of a healthy ~1e-3), with a loss near chance or barely falling: too small
    activation_limit: float = 1e4  # |activation| above this is out of range
    loss_spike_floor: float = 0.1  # a spike must also exceed this fraction of the run's starting loss (noise near 0 is no spike)
    init_gain_high: float = 5.0  # initial weight RMS x sqrt(fan-in) above this is poor initialization (Kaiming gives 1.4)
    init_gain_low: float = 0.01  # ... and below this
    embedding_rms_high: float = 10.0  # an embedding's initial RMS above this is poor initialization (default init gives 1)
    # the loss: progress judged against the run's own start
    loss_progress_poor: float = 0.5  # a loss that ends above this fraction of its start made poor progress
    loss_progress_steady: float = 0.2  # a loss that falls by this share of its start, steadily, to near its lowest: dead units are a warning
    # the learning rate over the run
    lr_growth_high: float = 20.0  # the rate grew this many times over the run (a warmup with no cap) ...
    lr_over_base_high: float = 5.0  # ... or to this many times the rate the optimizer was given, still rising at the end
    lr_decay_low: float = 1e-2  # ... or fell below this fraction of its peak early in the run (a scheduler stepped too often)
    lr_decay_dead: float = 1e-3  # ... and ends below this fraction: the rest of the run hardly moves the weights
    lr_base_low: float = 0.2  # the rate never reached this fraction of its base (initial_lr: a warmup longer than the run)
    # the optimizer's other settings
    adaptive_lr_typical_max: float = 1e-2  # an Adam/RMSprop rate at or below this is a typical one: its steps are ~lr a weight
    slow_progress: float = 0.5  # a loss that falls by less than this share of its start, with tiny steps, learns too slowly
    target_raw_units: float = 100.0  # regression targets this large (beside outputs 1000x smaller) are in raw units, not scaled
    loss_near_chance: float = 0.85  # a classifier's cross-entropy late in the run above this share of ln(C) learned next to nothing
    label_smoothing_high: float = 0.5  # label smoothing that takes this share from the true class leaves targets nearly uniform
    lr_early_low: float = 0.15  # a gradual schedule below this share of its peak rate ...
    lr_early_share: float = 0.4  # ... from this share of the run on, while the loss still falls: it decayed too early
    clip_ratio_slow: float = 0.25  # SGD-like steps cut to below this fraction by clipping, while the loss makes poor progress
    clip_ratio_low: float = 0.01  # clipping to below this fraction of the gradient's norm (or of its largest element)
    adam_lr_typical: float = 3e-4  # an Adam-family rate this high is no rate too low (small updates: noisy gradients)
    eps_over_grad_rms: float = 10.0  # Adam's eps this many times the gradients' RMS: the update shrinks to lr * g / eps
    eps_over_grad_rms_late: float = 3.0  # ... or this many times the second half's RMS, with the loss still falling at the end
    eps_still_falling: float = 0.9  # the last quarter's median loss below this share of the third's: still falling
    penalty_cos_high: float = 0.9  # cos(gradient, weights) above this in most layers: a weight penalty is all of the gradient
    coupled_decay_high: float = 0.05  # a coupled (L2) weight decay above typical values (1e-4 to 1e-2)
    weight_shrink_low: float = 0.5  # weights that shrink below this fraction of their start while the loss does not fall
    weight_shrink_decay: float = 0.8  # ... or below this one while the decay alone would take half of them over the run
    coupled_decay_over_grad: float = 0.75  # a coupled decay wd*|W| this size of |g| (or more): the step is mostly decay
    # the loss's inputs
    initial_loss_over_log_classes: float = 3.0  # a first cross-entropy this many times ln(C): the output layer starts far off
    dropout_high: float = 0.7  # a dropout rate at or above this drops most units
    dropout_high_attention: float = 0.5  # in a transformer (trained near 0.1), this rate on several layers
    frozen_untrained_share: float = 0.05  # frozen weights at a fresh init holding this share of the model ...
    frozen_untrained_progress: float = 0.6  # ... while the loss falls less than this share of its start
    frozen_untrained_most: float = 0.5  # frozen at a fresh init and holding this share of the model: named however the loss falls
    # attention
    attention_collapsed_maxprob: float = 0.9  # a head whose largest weight averages above this looks at one key
    attention_collapsed_entropy: float = 0.15  # ... or whose entropy (over log of the keys) is below this

    def replace(self, **changes: Any) -> Thresholds:
        return dataclasses.replace(self, **changes)


class ThresholdError(ValueError):
    pass


def from_mapping(values: dict[str, Any], where: str, base: Thresholds | None = None) -> Thresholds:
    base = base or Thresholds()
    fields = {f.name: f for f in dataclasses.fields(Thresholds)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            raise ThresholdError(f"{where}: unknown threshold {key!r}; known: {', '.join(sorted(fields))}")
        want = int if fields[key].type in ("int", int) else float
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ThresholdError(f"{where}: threshold {key!r} must be a number, got {value!r}")
        changes[key] = want(value)
    return base.replace(**changes)


def load(start: str | Path = ".") -> Thresholds:
    """Thresholds from the nearest ``gradsight.toml`` or ``pyproject.toml`` at or above ``start``."""
    here = Path(start).resolve()
    for folder in [here, *here.parents]:
        own = folder / "gradsight.toml"
        if own.is_file():
            data = _read(own)
            return from_mapping(data.get("thresholds", {}), f"{own} [thresholds]")
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            data = _read(pyproject)
            table = data.get("tool", {}).get("gradsight", {})
            if table:
                return from_mapping(table.get("thresholds", {}), f"{pyproject} [tool.gradsight.thresholds]")
    return Thresholds()


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdError(f"{path}: {exc}") from None
