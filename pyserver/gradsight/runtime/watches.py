"""Tensor breakpoints and watches: ``--break`` conditions and watches set from the editor through the store.

Each is evaluated on every step's values. When one holds, it is an event in the store; under a
debugger the training loop then pauses in the user's frame right after the step, and a ``--break``
with no debugger ends the run (after the snapshot is written).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..conditions import Condition, ConditionError, parse
from ..store import EVENT_BREAKPOINT, EVENT_WARNING, StoreWriter
from .pause import debugger_attached, pause, user_frame
from .triggers import Fired, History, Trigger, condition_check


class GradsightStop(BaseException):
    """Ends the run at a ``--break`` breakpoint when no debugger is attached.

    A BaseException, like KeyboardInterrupt, so the user's ``except Exception`` does not swallow it.
    """


class StepLimit(GradsightStop):
    """Ends the run after ``--max-steps`` steps (a fix's validation re-runs the script up to the anomaly and a margin)."""


@dataclass
class Action:
    fired: Fired
    kind: str  # "pause" (debugger), "stop" (--break without debugger), "stop_all" (every rank of a distributed run)
    frame: Any = None


class Watches:
    def __init__(self, breaks: tuple[Condition, ...]) -> None:
        self.triggers: list[tuple[Trigger, bool]] = [(Trigger(c.text, condition_check(c, c.text), 1), True) for c in breaks]
        self._version = 0
        self.actions: list[Action] = []

    @property
    def has_breaks(self) -> bool:
        return any(is_break for _, is_break in self.triggers)

    def add_breaks(self, breaks: tuple[Condition, ...]) -> None:
        self.triggers += [(Trigger(c.text, condition_check(c, c.text), 1), True) for c in breaks]

    def refresh(self, writer: StoreWriter, step: int) -> None:
        """Take the watches the editor wrote to the store (polled by the writer thread) when they changed."""
        version, rows = writer.watches
        if version == self._version:
            return
        self._version = version
        keep: list[tuple[Trigger, bool]] = [(t, b) for t, b in self.triggers if b]
        for wid, text, module, _file, _line in rows:
            try:
                cond = parse(text)
            except ConditionError as exc:
                writer.put_event(step, EVENT_WARNING, "bad_watch", condition=text, message=str(exc))
                continue
            keep.append((Trigger(f"watch {wid}", condition_check(cond, cond.text, scope=module or None), 1), False))
        self.triggers = keep

    def evaluate(self, history: History, writer: StoreWriter, step: int) -> None:
        """Record each watch that holds at this step, and what to do about it after the step."""
        self.refresh(writer, step)
        attached = None
        for trig, is_break in self.triggers:
            hit = trig(history)
            if hit is None:
                continue
            if attached is None:
                attached = debugger_attached()
            writer.put_event(step, EVENT_BREAKPOINT, "break" if is_break else "watch", module=hit.module, condition=hit.condition,
                             value=hit.value, message=hit.message + ("" if attached else " (no debugger attached)"))
            if attached:
                self.actions.append(Action(hit, "pause", user_frame()))
            elif is_break:
                self.actions.append(Action(hit, "stop"))

    def run_actions(self, step: int, writer: StoreWriter, store_path: str, tag: str = "") -> None:
        """After the step: pause in the user's frame, or end the run."""
        actions, self.actions = self.actions, []
        for a in actions:
            f = a.fired
            where = f" in {f.module!r}" if f.module else ""
            value = f" ({f.value:.4g})" if f.value is not None else ""
            msg = f"gradsight{tag}: breakpoint {f.condition}{where}{value} at step {step}"
            if a.kind == "pause":
                print(msg + ": pausing in your training loop", file=sys.stderr, flush=True)
                pause(a.frame)
            elif a.kind == "stop_all":  # the same words on every rank of a distributed run
                writer.flush()
                raise GradsightStop(f"gradsight{tag}: a breakpoint held {f.condition} at step {step}; every rank stopped, "
                                    f"snapshot in {store_path}")
            else:
                writer.flush()
                raise GradsightStop(msg + f"; run stopped, snapshot in {store_path}")
