"""The condition language of tensor breakpoints and triggers (stdlib only)."""

from .parser import (
    LAYER_METRICS,
    METRICS,
    STEP_METRICS,
    Condition,
    ConditionError,
    Context,
    parse,
)

__all__ = ["LAYER_METRICS", "METRICS", "STEP_METRICS", "Condition", "ConditionError", "Context", "parse"]
