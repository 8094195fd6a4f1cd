"""Tensor breakpoints in a real debugpy session, driven by a DAP client (justMyCode on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradsight.store import RunStore, StoreError, add_watch

from .conftest import FAULTS, ROOT
from .dap import DapClient, free_port

pytest.importorskip("debugpy")

STEP_LINE = next(i for i, line in enumerate(FAULTS.read_text().splitlines(), 1) if line.strip() == "optimizer.step()")
AFTER_STEP_LINE = STEP_LINE + 1


def _spawn(port: int, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver"), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    cmd = [sys.executable, "-Xfrozen_modules=off", "-m", "debugpy", "--listen", f"127.0.0.1:{port}", "--wait-for-client", *args]
    # output to a file, not a pipe: debugpy's adapter process inherits it and lives as long as the client
    with open(log, "wb") as fh:
        return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _debuggee(port: int, log: Path, *trace_args: str) -> subprocess.Popen[bytes]:
    return _spawn(port, log, "-m", "gradsight", "trace", *trace_args)


def _finish(client: DapClient, proc: subprocess.Popen[bytes], log: Path) -> tuple[int | None, str]:
    try:
        proc.wait(timeout=120)
    finally:
        client.close()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the adapter, if still there
        except ProcessLookupError:
            pass
        proc.wait(10)
    return proc.returncode, log.read_text(errors="replace")


def test_scoped_watch_from_the_store_pauses_in_the_users_frame(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "run.db"
    at = 30
    log = tmp_path / "debuggee.log"
    proc = _debuggee(port, log, str(FAULTS), "--fault", "grad_explode", "--at", str(at), "--steps", "45", "--sleep", "0.05",
                     "--output", str(store))
    client = DapClient(port)
    try:
        client.attach()
        deadline = time.monotonic() + 60
        while not _ready(store) and time.monotonic() < deadline:  # the file exists a moment before its tables
            time.sleep(0.05)
        # what the editor does for a tensor breakpoint on the line `self.fc1 = nn.Linear(...)`
        add_watch(store, "grad_norm > 50", module="fc1", file=str(FAULTS), line=17)
        stopped = client.event("stopped")
        frame = client.top_frame(stopped["body"]["threadId"])
        assert frame["source"]["path"] == str(FAULTS)
        assert frame["name"] == "main"
        assert frame["line"] == AFTER_STEP_LINE  # in the training loop, right after the step that fired
        local = client.locals(frame["id"])
        assert local["step"] == str(at)
        assert "model" in local and "optimizer" in local
        out = "".join(client.output)
        assert "gradsight: breakpoint grad_norm > 50 in 'fc1'" in out and f"at step {at}" in out
        client.request("continue", {"threadId": stopped["body"]["threadId"]})
    finally:
        code, err = _finish(client, proc, log)
    assert code == 0, err  # under a debugger a breakpoint pauses, it does not end the run
    with RunStore(store) as run:
        events = run.events("breakpoint")
        assert [(e.step, e.module, e.name) for e in events] == [(at, "fc1", "watch")]


def test_check_as_conditional_breakpoint_stops_only_on_that_step(tmp_path: Path) -> None:
    port = free_port()
    at = 17
    log = tmp_path / "debuggee.log"
    proc = _debuggee(port, log, str(FAULTS), "--fault", "grad_explode", "--at", str(at), "--steps", "40", "--output", str(tmp_path / "run.db"))
    client = DapClient(port)
    try:
        condition = "__import__('gradsight').check('grad_norm > 50')"
        client.attach({str(FAULTS): [{"line": STEP_LINE, "condition": condition}]})
        stopped = client.event("stopped")
        assert stopped["body"]["reason"] == "breakpoint"
        thread = stopped["body"]["threadId"]
        frame = client.top_frame(thread)
        assert frame["source"]["path"] == str(FAULTS) and frame["line"] == STEP_LINE
        assert client.locals(frame["id"])["step"] == str(at)
        client.request("continue", {"threadId": thread})
        # no other step holds the condition: the next thing we hear is the end of the run
        client.event("terminated", timeout=120)
    finally:
        code, err = _finish(client, proc, log)
    assert code == 0, err


def test_check_without_a_session_finds_the_model_in_the_frame(tmp_path: Path) -> None:
    """Plain `python -m debugpy script.py`: check() finds the model and optimizer in the user's frame."""
    port = free_port()
    at = 11
    log = tmp_path / "debuggee.log"
    proc = _spawn(port, log, str(FAULTS), "--fault", "grad_explode", "--at", str(at), "--steps", "25")
    client = DapClient(port)
    try:
        condition = "__import__('gradsight').check('layer(\"fc1\").grad_norm > 50')"
        client.attach({str(FAULTS): [{"line": STEP_LINE, "condition": condition}]})
        stopped = client.event("stopped")
        frame = client.top_frame(stopped["body"]["threadId"])
        assert client.locals(frame["id"])["step"] == str(at)
        client.request("continue", {"threadId": stopped["body"]["threadId"]})
        client.event("terminated", timeout=120)
    finally:
        code, err = _finish(client, proc, log)
    assert code == 0, err


def _ready(store: Path) -> bool:
    try:
        RunStore(store).close()
    except (StoreError, FileNotFoundError):
        return False
    return True
