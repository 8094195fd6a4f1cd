"""``gradsight validate`` run from the editor: a subprocess read asynchronously, its progress lines parsed (no LSP here).

The CLI prints one JSON object on stdout (``{"fixes": [{"id", "verdict", "summary", "effect"}, ...], ...}``) and
progress lines on stderr: ``validate: 2/3 fix-id ...``. It stores the verdicts in the run store, so a later
``suggest`` returns them in each fix's ``validated``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROGRESS = re.compile(r"^\s*validate:\s*(\d+)\s*/\s*(\d+|\?)(?!\S)\s*(.*)$")
STOP_WAIT_S = 5.0  # after SIGTERM, before SIGKILL
_RUNNING: set[asyncio.subprocess.Process] = set()  # stopped when the server exits, however it exits


class ValidateError(RuntimeError):
    """The validation did not give verdicts: the message is the CLI's last word on why."""


@dataclass(frozen=True)
class Step:
    done: int
    total: int | None  # None while the CLI does not know yet (``validate: 0/? ...``)
    message: str  # the rest of the line: the fix's id and what the re-run says

    @property
    def percentage(self) -> int | None:
        return max(0, min(100, round(100 * self.done / self.total))) if self.total else None


def parse_progress(line: str) -> Step | None:
    """``validate: 2/3 fix-id ...`` -> Step(2, 3, "fix-id ..."), ``validate: 0/? ...`` -> Step(0, None, ...); None for
    any other line."""
    m = PROGRESS.match(line)
    if m is None:
        return None
    return Step(int(m.group(1)), None if m.group(2) == "?" else int(m.group(2)), m.group(3).strip())


def command(run: str, *, top: int | None = 3, fix: str | None = None, steps: int | None = None,
            python: str | None = None) -> list[str]:
    """The argv of ``gradsight validate RUN.db (--fix ID | --top N) [--steps K] --json`` with this interpreter."""
    argv = [python or sys.executable, "-m", "gradsight", "validate", run]
    argv += ["--fix", fix] if fix else ["--top", str(top if top is not None else 3)]
    if steps is not None:
        argv += ["--steps", str(steps)]
    return [*argv, "--json"]


def fix_id(entry: Any) -> str | None:
    """The fix an entry of the CLI's ``fixes`` is about (its ``id``, or ``fix``)."""
    if not isinstance(entry, dict):
        return None
    for key in ("id", "fix"):
        if isinstance(entry.get(key), str) and entry[key]:
            return str(entry[key])
    return None


def verdicts(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{fix id: {"verdict", "summary", "effect"}}`` from the CLI's JSON."""
    out: dict[str, dict[str, Any]] = {}
    for f in result.get("fixes") or []:
        i = fix_id(f)
        if i is not None and isinstance(f.get("verdict"), str):
            out[i] = {"verdict": f["verdict"], "summary": f.get("summary") or "", "effect": f.get("effect") or ""}
    return out


async def run(argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
              on_progress: Callable[[Step], None] | None = None, on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``argv`` (a ``gradsight validate ... --json``), calling ``on_progress`` for each progress line of its stderr
    (``on_line`` for every line), and return its JSON. Cancelled, it stops the process and the re-runs it started.
    A non-zero exit raises ValidateError with stderr's last line."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, limit=1 << 20, start_new_session=os.name == "posix")
    assert proc.stdout is not None and proc.stderr is not None
    _RUNNING.add(proc)
    err_lines: list[str] = []

    async def read_stderr() -> None:
        assert proc.stderr is not None
        while True:
            raw = await proc.stderr.readline()
            if not raw:
                return
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            err_lines.append(line)
            del err_lines[:-200]
            if on_line is not None:
                on_line(line)
            step = parse_progress(line)
            if step is not None and on_progress is not None:
                on_progress(step)

    try:
        out, _ = await asyncio.gather(proc.stdout.read(), read_stderr())
        rc = await proc.wait()
    except BaseException:  # cancelled (or the server is going): no validation left running behind it
        await _stop(proc)
        raise
    finally:
        _RUNNING.discard(proc)
    if rc != 0:
        last = next((ln.strip() for ln in reversed(err_lines) if ln.strip()), None)
        raise ValidateError(last or f"gradsight validate exited with status {rc}")
    return _json(out.decode("utf-8", errors="replace"), err_lines)


def _json(text: str, err_lines: list[str]) -> dict[str, Any]:
    candidates = [text.strip()] + [ln.strip() for ln in reversed(text.splitlines()) if ln.strip().startswith("{")]
    for c in candidates:
        try:
            value = json.loads(c)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("fixes"), list):  # each entry named by "id" too
            value["fixes"] = [{**f, "id": fix_id(f)} if isinstance(f, dict) and fix_id(f) else f for f in value["fixes"]]
            return value
    last = next((ln.strip() for ln in reversed(err_lines) if ln.strip()), "")
    raise ValidateError("gradsight validate printed no verdicts" + (f": {last}" if last else ""))


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    sig_term = _killer(proc, signal.SIGTERM)
    sig_term()
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_WAIT_S)
    except (TimeoutError, asyncio.CancelledError):
        _killer(proc, getattr(signal, "SIGKILL", signal.SIGTERM))()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_WAIT_S)


@atexit.register
def _stop_all() -> None:
    for proc in list(_RUNNING):
        if proc.returncode is None:
            _killer(proc, signal.SIGTERM)()


def _killer(proc: asyncio.subprocess.Process, sig: int) -> Callable[[], None]:
    def kill() -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if os.name == "posix":
                os.killpg(proc.pid, sig)  # its own session: the validate process and the re-runs it started
            else:
                proc.send_signal(sig)

    return kill
