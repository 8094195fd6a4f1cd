"""The explicit API, for scripts not started by ``gradsight trace``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from ..conditions import parse
from ..thresholds import Thresholds
from . import session as _session
from .session import DEFAULT_CAPTURE_BYTES, DEFAULT_CAPTURE_WINDOW, DEFAULT_EVERY, Session, Settings
from .triggers import BUILTIN, parse_trigger_list


class Handle:
    """What :func:`watch` returns: close it (or use it as a context manager) to finish the run."""

    def __init__(self, session: Session, joined: bool = False) -> None:
        self._session = session
        self._joined = joined  # watch() inside a running session (gradsight trace): closing is the session's

    @property
    def store(self) -> str:
        return self._session.store_path

    @property
    def step(self) -> int:
        return self._session.step

    @property
    def anomalies(self) -> list[tuple[int, str]]:
        """(step, trigger) of every anomaly caught so far."""
        return list(self._session.anomalies)

    @property
    def own_share(self) -> float | None:
        """gradsight's own time on the training thread over the rest of the run's time (0.04: it made
        the run 4% longer), from the first step to now or to the close; None before a step."""
        return self._session.own_share()

    def log(self, loss: float | torch.Tensor | None = None) -> None:
        self._session.log(loss)

    def mark_step(self) -> None:
        """End a step by hand, for loops that update weights without a torch optimizer."""
        self._session.mark_step()

    def close(self) -> None:
        if not self._joined:
            self._session.close()

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self._joined:
            self._session.close("finished" if exc_type is None else "crashed")


def watch(model: nn.Module, optimizer: torch.optim.Optimizer | None = None, *, store: str | os.PathLike[str] = "run.db",
          triggers: str | Iterable[str] = BUILTIN, every: int = DEFAULT_EVERY, capture_window: int = DEFAULT_CAPTURE_WINDOW,
          breaks: Iterable[str] = (), thresholds: Thresholds | None = None, defer: bool | None = None,
          overwrite: bool = False, capture_bytes: int = DEFAULT_CAPTURE_BYTES) -> Handle:
    """Watch ``model`` from now on, writing the run store ``store``.

    An existing store at ``store`` is kept and the run gets the next free name (``run-1.db``; see
    ``handle.store``) unless ``overwrite``; any other existing file is refused. Called while a session
    already runs (a script started by ``gradsight trace`` that watches itself), it joins that session:
    the model and optimizer are watched there, ``breaks`` are added, the other options are the session's.
    ``triggers``: built-in names (loss_spike, grad_explode, nan_inf, vanishing, dead_units) and/or
    conditions such as ``"layer('fc1').grad_norm > 50"``. ``every``: activation statistics every N steps.
    ``breaks``: conditions that pause under a debugger (or stop the run without one).
    ``defer``: read each step's gradient norms one step later so the host never waits for the
    accelerator (default: on CUDA, off while breakpoints or watches are set).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"gradsight.watch: model must be a torch.nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"gradsight.watch: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    parsed_breaks = tuple(parse(b) for b in breaks)
    active = _session.ACTIVE
    if active is not None and not active.closed:
        active.join(model, optimizer, parsed_breaks)
        return Handle(active, joined=True)
    spec = [triggers] if isinstance(triggers, str) else list(triggers)
    names, conds = parse_trigger_list(spec)
    settings = Settings(triggers=tuple(names), conditions=tuple(conds), breaks=parsed_breaks,
                        every=every, capture_window=capture_window, capture_bytes=capture_bytes,
                        thresholds=thresholds or Thresholds(), defer=defer)
    return Handle(Session(store, model=model, optimizer=optimizer, settings=settings, overwrite=overwrite))


def log(loss: Any = None) -> None:
    active = _session.ACTIVE
    if active is None:
        raise RuntimeError("gradsight.log: no active session; call gradsight.watch(model, optimizer) first")
    active.log(loss)
