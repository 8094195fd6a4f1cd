"""Pictures and reports from a run store (matplotlib; never torch)."""
