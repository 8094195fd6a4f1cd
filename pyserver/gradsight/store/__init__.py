"""The run store: schema, background writer and reader (sqlite3 and numpy only)."""

from .paths import OutputError, check_replaceable, is_store, prepare_output, ro_uri
from .reader import DamagedStore, Event, ModuleInfo, Observation, RunStore, TensorInfo, add_validation, add_watch, validations
from .rows import ModuleRow, ParamRow, StepRow
from .schema import (
    EVENT_BREAKPOINT,
    EVENT_ORIGIN,
    EVENT_SKIPPED,
    EVENT_TRIGGER,
    EVENT_WARNING,
    NEVER_STEPPED,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    UNREGISTERED,
    StoreError,
)
from .writer import StoreWriter

__all__ = [
    "EVENT_ORIGIN",
    "EVENT_SKIPPED",
    "DamagedStore",
    "ModuleRow",
    "Observation",
    "OutputError",
    "ParamRow",
    "StepRow",
    "check_replaceable",
    "is_store",
    "prepare_output",
    "ro_uri",
    "EVENT_BREAKPOINT",
    "EVENT_TRIGGER",
    "EVENT_WARNING",
    "NEVER_STEPPED",
    "UNREGISTERED",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "Event",
    "ModuleInfo",
    "RunStore",
    "StoreError",
    "StoreWriter",
    "TensorInfo",
    "add_validation",
    "add_watch",
    "validations",
]
