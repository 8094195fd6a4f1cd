"""Run an unchanged script (or ``-m module``) as ``__main__`` under a session."""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
import time
import traceback
from types import FrameType, TracebackType
from typing import Any

from ..store import OutputError
from . import creation
from .session import GradsightStop, Session, Settings, StepLimit

STOPPED_AT_BREAK = 3  # exit status when a --break breakpoint ended the run


class Progress:
    """A one-line status on a terminal, and a line per anomaly anywhere."""

    def __init__(self, stream: Any = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) and not quiet
        self.quiet = quiet
        self._shown = 0
        self._last = 0.0
        self._line = False

    def __call__(self, session: Session) -> None:
        for step, name in session.anomalies[self._shown:]:
            self._clear()
            print(f"gradsight{session.dist.tag}: anomaly at step {step}: {name}", file=self.stream, flush=True)
        self._shown = len(session.anomalies)
        now = time.monotonic()
        if self.tty and now - self._last > 0.25:
            self._last = now
            hist = session.history
            loss = hist.current.scalars.get("loss") if hist is not None and hist.steps else None
            text = f"gradsight: step {session.step}"
            if loss is not None:
                text += f" · loss {loss:.4g}"
            text += f" · anomalies {len(session.anomalies)}"
            self.stream.write("\r" + text + "\033[K")
            self.stream.flush()
            self._line = True

    def _clear(self) -> None:
        if self._line:
            self.stream.write("\r\033[K")
            self._line = False

    def finish(self) -> None:
        self._clear()


def _user_traceback(tb: TracebackType | None, script: str | None) -> TracebackType | None:
    """Drop gradsight's and runpy's frames from the top of a traceback."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cur = tb
    while cur is not None:
        raw = cur.tb_frame.f_code.co_filename
        name = os.path.abspath(raw)
        if not name.startswith(here) and os.path.basename(name) != "runpy.py" and not raw.startswith("<frozen"):
            return cur
        cur = cur.tb_next
    return tb


class _Exit:
    """How the process ends when the script did not end normally: as it would have without gradsight."""

    interrupted = False  # an uncaught KeyboardInterrupt: Python dies by SIGINT after finalizing

    @classmethod
    def at_exit(cls) -> None:
        if cls.interrupted:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)


def run(target: str, args: list[str], *, module: bool, store: str, settings: Settings, quiet: bool = False,
        overwrite: bool = False) -> int:
    """Run ``target`` instrumented; returns the exit status ``python target`` would have had (an uncaught
    KeyboardInterrupt and SIGTERM end the process by the signal, as Python itself does, after the store is closed)."""
    if not module and not os.path.isfile(target):
        print(f"gradsight trace: no such script: {target}", file=sys.stderr)
        return 2
    progress = Progress(quiet=quiet)
    argv0 = os.path.abspath(target) if not module else target
    try:
        session = Session(store, settings=settings, script=argv0, argv=[target, *args], progress=progress, overwrite=overwrite)
    except OutputError as exc:
        print(f"gradsight trace: {exc}", file=sys.stderr)
        return 2
    atexit.register(_Exit.at_exit)  # before the script's own: it runs after them, as Python's own exit by SIGINT does

    def terminate(signum: int, frame: FrameType | None) -> None:
        """SIGTERM with its default action: close the store, then die by the signal as the script would have."""
        try:
            progress.finish()
            session.close("terminated")
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [target, *args]
    script_dir = os.path.dirname(os.path.abspath(target)) if not module else os.getcwd()
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    previous_term = signal.getsignal(signal.SIGTERM)
    if previous_term in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, terminate)
    status = 0
    outcome = "finished"
    creation.install()  # the source map: note where each module the script builds is created (see creation.py)
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        status = _exit_status(exc.code)
        outcome = "finished" if status == 0 else "failed"
    except StepLimit as exc:
        progress.finish()
        if not quiet:
            print(str(exc), file=sys.stderr)
        status, outcome = 0, "limited"
    except GradsightStop as exc:
        progress.finish()
        print(str(exc), file=sys.stderr)
        status, outcome = STOPPED_AT_BREAK, "stopped"
    except KeyboardInterrupt as exc:
        progress.finish()
        session.close("interrupted")
        traceback.print_exception(type(exc), exc, _user_traceback(exc.__traceback__, target))
        _Exit.interrupted = True
        status, outcome = 130, "interrupted"
    except BaseException as exc:
        progress.finish()
        traceback.print_exception(type(exc), exc, _user_traceback(exc.__traceback__, target))
        status, outcome = 1, "crashed"
    finally:
        creation.uninstall()
        progress.finish()
        sys.argv = old_argv
        if old_path0 is not None and sys.path:
            sys.path[0] = old_path0
        if previous_term in (signal.SIG_DFL, None) and signal.getsignal(signal.SIGTERM) is terminate:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        session.close(outcome)
    if not quiet and not _Exit.interrupted:
        _summary(session)
    if outcome == "stopped" and session.dist.active:
        session.dist.exit_together(status)  # (does not return)
    return status


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _summary(session: Session) -> None:
    n = len(session.anomalies)
    parts = [f"{name} at step {step}" for step, name in session.anomalies]
    tag = session.dist.tag
    line = f"gradsight{tag}: {session.step} steps, {n} anomal{'y' if n == 1 else 'ies'}"
    if parts:
        line += ": " + ", ".join(parts)
    share = session.own_share()
    if share is not None and session.step >= 10:
        line += f"; its own work added {share:.0%} to the run's time"
    print(line, file=sys.stderr)
    if session.layout is None and session.step == 0:
        print(f"gradsight{tag}: no training step was seen (no optimizer.step() and no backward())", file=sys.stderr)
    print(f"gradsight{tag}: run store {session.store_path}  (inspect: gradsight diagnose {session.store_path})", file=sys.stderr)
