"""Instrumentation of PyTorch training (imports torch)."""
