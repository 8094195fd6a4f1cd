"""Health scores, root cause and the diagnosis, from a run store (numpy only, never torch)."""

from .diagnose import SCHEMA, diagnose

__all__ = ["SCHEMA", "diagnose"]
