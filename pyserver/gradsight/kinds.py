"""The finding kinds and the places outside the network: one list that every room imports.

The diagnosis contract (``gradsight diagnose --json``, DESIGN.md) names each issue's
``kind`` from this list; kinds are added, never removed. A fault of the loss, of the
optimizer (its learning rate and other hyperparameters, or the loop's handling of
gradients) or of the input data names the module ``loss``, ``optimizer`` or ``input``.
Standard library only: the runtime, analysis, fixes, server and tests all read it.
"""

from __future__ import annotations

# places outside the network
LOSS = "loss"
OPTIMIZER = "optimizer"
INPUT = "input"
PLACES = (LOSS, OPTIMIZER, INPUT)

# kinds of the first contract
EXPLODING_GRADIENT = "exploding_gradient"
VANISHING_GRADIENT = "vanishing_gradient"
DEAD_UNITS = "dead_units"
NAN_INF = "nan_inf"
ACTIVATION_OUT_OF_RANGE = "activation_out_of_range"
SATURATION = "saturation"
LOSS_SPIKE = "loss_spike"
LOSS_NOT_DECREASING = "loss_not_decreasing"
OSCILLATING_LOSS = "oscillating_loss"
UPDATE_RATIO_TOO_HIGH = "update_ratio_too_high"
UPDATE_RATIO_TOO_LOW = "update_ratio_too_low"
NOT_UPDATED = "not_updated"
FROZEN = "frozen"
LEARNING_RATE_TOO_HIGH = "learning_rate_too_high"
LEARNING_RATE_TOO_LOW = "learning_rate_too_low"
GRADS_NOT_ZEROED = "grads_not_zeroed"
DOUBLE_SOFTMAX = "double_softmax"
POOR_INITIALIZATION = "poor_initialization"

# kinds added with the fault zoo
NO_GRADIENT = "no_gradient"  # trainable parameters the optimizer holds never receive a gradient (the graph is cut before them)
WEIGHT_DECAY_TOO_HIGH = "weight_decay_too_high"  # the decay term dominates the update
OPTIMIZER_EPS_TOO_HIGH = "optimizer_eps_too_high"  # Adam-style eps of the order of sqrt(v): updates shrink to lr * g / eps
GRADIENT_CLIPPING_TOO_STRONG = "gradient_clipping_too_strong"  # clipping rescales nearly every step to a tiny norm
DROPOUT_TOO_HIGH = "dropout_too_high"  # a dropout rate that drops most units
DOUBLE_SIGMOID = "double_sigmoid"  # probabilities fed to a loss that applies sigmoid itself (BCEWithLogits)
LOSS_TARGET_MISMATCH = "loss_target_mismatch"  # targets that do not fit the loss: class indices in a regression loss, broadcast shapes
LOSS_SCALE_TOO_HIGH = "loss_scale_too_high"  # a loss summed (not averaged) over a large batch: every step scaled by the batch size
ATTENTION_COLLAPSE = "attention_collapse"  # heads that put nearly all their attention on one token
ATTENTION_ENTROPY_COLLAPSE = "attention_entropy_collapse"  # attention entropy falling towards zero over the run

ALL = (
    EXPLODING_GRADIENT, VANISHING_GRADIENT, DEAD_UNITS, NAN_INF, ACTIVATION_OUT_OF_RANGE, SATURATION, LOSS_SPIKE,
    LOSS_NOT_DECREASING, OSCILLATING_LOSS, UPDATE_RATIO_TOO_HIGH, UPDATE_RATIO_TOO_LOW, NOT_UPDATED, FROZEN,
    LEARNING_RATE_TOO_HIGH, LEARNING_RATE_TOO_LOW, GRADS_NOT_ZEROED, DOUBLE_SOFTMAX, POOR_INITIALIZATION,
    NO_GRADIENT, WEIGHT_DECAY_TOO_HIGH, OPTIMIZER_EPS_TOO_HIGH, GRADIENT_CLIPPING_TOO_STRONG, DROPOUT_TOO_HIGH,
    DOUBLE_SIGMOID, LOSS_TARGET_MISMATCH, LOSS_SCALE_TOO_HIGH, ATTENTION_COLLAPSE, ATTENTION_ENTROPY_COLLAPSE,
)

# a few words each, for hovers, inlay tooltips and reports
LABELS = {
    EXPLODING_GRADIENT: "exploding", VANISHING_GRADIENT: "vanishing", DEAD_UNITS: "dead units", NAN_INF: "NaN/Inf",
    ACTIVATION_OUT_OF_RANGE: "activations out of range", SATURATION: "saturated", LOSS_SPIKE: "loss spike",
    LOSS_NOT_DECREASING: "loss not decreasing", OSCILLATING_LOSS: "loss oscillates", UPDATE_RATIO_TOO_HIGH: "updates too large",
    UPDATE_RATIO_TOO_LOW: "updates too small", NOT_UPDATED: "never updated", FROZEN: "frozen",
    LEARNING_RATE_TOO_HIGH: "learning rate too high", LEARNING_RATE_TOO_LOW: "learning rate too low",
    GRADS_NOT_ZEROED: "gradients not zeroed", DOUBLE_SOFTMAX: "softmax twice", POOR_INITIALIZATION: "poor initialisation",
    NO_GRADIENT: "no gradient", WEIGHT_DECAY_TOO_HIGH: "weight decay too high", OPTIMIZER_EPS_TOO_HIGH: "optimizer eps too high",
    GRADIENT_CLIPPING_TOO_STRONG: "clipping too strong", DROPOUT_TOO_HIGH: "dropout too high", DOUBLE_SIGMOID: "sigmoid twice",
    LOSS_TARGET_MISMATCH: "targets do not fit the loss", LOSS_SCALE_TOO_HIGH: "loss scaled by the batch",
    ATTENTION_COLLAPSE: "attention collapsed", ATTENTION_ENTROPY_COLLAPSE: "attention entropy collapsed",
}


def label(kind: str) -> str:
    return LABELS.get(kind, kind.replace("_", " "))
