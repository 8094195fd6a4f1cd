"""The run store: schema, background writer and reader (sqlite3 and numpy only)."""

from .reader import Event, ModuleInfo, RunStore, TensorInfo, add_watch
from .schema import EVENT_BREAKPOINT, EVENT_TRIGGER, EVENT_WARNING, SCHEMA_NAME, SCHEMA_VERSION, StoreError
from .writer import StoreWriter

__all__ = [
    "EVENT_BREAKPOINT",
    "EVENT_TRIGGER",
    "EVENT_WARNING",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "Event",
    "ModuleInfo",
    "RunStore",
    "StoreError",
    "StoreWriter",
    "TensorInfo",
    "add_watch",
]
