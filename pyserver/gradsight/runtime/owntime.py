"""gradsight's own time on the training thread, and the warning when it slows training noticeably.

One running total of the seconds spent in the step callbacks (the activation recorder counts its
hooks' time itself); over windows of steps its share of the rest of the step time is judged, and
said once, on stderr and as an ``overhead`` warning event.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from ..store import EVENT_WARNING, StoreWriter

# gradsight measures its own time on the training thread over windows of steps and says so, once,
# when it slows training noticeably: more than this share of the rest of the step, and more than
# OVERHEAD_MIN_MS per step (a toy model's sub-millisecond step is not worth a warning)
OVERHEAD_WINDOW = 200
OVERHEAD_SHARE = 0.25
OVERHEAD_MIN_MS = 2.0


class OwnTime:
    def __init__(self, hooks_spent: Callable[[], float]) -> None:
        self._hooks_spent = hooks_spent  # seconds in the activation hooks so far
        self.steps = 0.0  # seconds in the step callbacks
        self.started: float | None = None  # perf_counter() when the first step began
        self.closed_at: float | None = None
        self._window = (0, time.perf_counter(), 0.0)  # the window's first step, its start time, own time then
        self.warned = False

    def timed(self, fn: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        if self.started is None:
            self.started = t0
        try:
            fn()
        finally:
            self.steps += time.perf_counter() - t0

    def seconds(self) -> float:
        return self.steps + self._hooks_spent()

    def share(self) -> float | None:
        """Own time over the rest of the run's time since the first step (to the close, once closed):
        0.04 means it made the run 4% longer. None before a step."""
        if self.started is None:
            return None
        own = self.seconds()
        rest = (self.closed_at or time.perf_counter()) - self.started - own
        return own / rest if rest > 0 else None

    def close(self) -> None:
        self.closed_at = time.perf_counter()

    def check(self, step: int, writer: StoreWriter, every: int, default_every: int) -> None:
        """At the end of each window of steps: the window's share, reported once when it is too large."""
        now, total = time.perf_counter(), self.seconds()
        first, start, before = self._window
        self._window = (step, now, total)
        own = total - before
        steps = step - first
        rest = now - start - own
        if self.warned or first == 0 or steps <= 0 or rest <= 0:  # (the first window holds the session's start)
            return
        share, per_step = own / rest, own / steps * 1000
        if share <= OVERHEAD_SHARE or per_step <= OVERHEAD_MIN_MS:
            return
        self.warned = True
        hint = (f"activation statistics every {every} step{'s' if every > 1 else ''}: a larger every (--every) lowers it"
                if every < default_every else "most of it is per-step gradient statistics, which grow with the number of parameter tensors")
        what = f"own work made steps {first}-{step - 1} {1 + share:.2g}x slower ({per_step:.1f} ms a step; {hint})"
        print(f"gradsight: its {what}", file=sys.stderr, flush=True)
        writer.put_event(step - 1, EVENT_WARNING, "overhead", value=share, message=f"gradsight's {what}",
                         data={"steps": [first, step - 1], "ms_per_step": per_step, "every": every})
