"""`gradsight trace`: unchanged scripts, argv and exit status kept, --break, bad input, killed writers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradsight.store import RunStore, StoreError

from .conftest import FAULTS, ROOT, SCRIPTS, gradsight_cmd, old_schema_store, run_gradsight


def test_argv_exit_status_and_main(tmp_path: Path) -> None:
    out = tmp_path / "argv.json"
    store = tmp_path / "run.db"
    # gradsight's options before and after the script; the script's own after it
    proc = run_gradsight("trace", "--every", "5", str(FAULTS), "--steps", "3", "--argv-out", str(out), "--exit", "7",
                         "--output", str(store), "--", "--fault", "none")
    assert proc.returncode == 7, proc.stderr
    seen = json.loads(out.read_text())
    assert seen["argv"] == [str(FAULTS), "--steps", "3", "--argv-out", str(out), "--exit", "7", "--fault", "none"]
    assert seen["name"] == "__main__"
    assert seen["path0"] == str(SCRIPTS)
    assert "gradsight: 3 steps, 0 anomalies" in proc.stderr
    with RunStore(store) as run:
        assert run.run()["status"] == "failed"
        assert run.run()["settings"]["every"] == 5


def test_script_exception_passes_through(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text("import torch\nm = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for i in range(3):\n    m(torch.ones(1, 2)).sum().backward()\n    opt.step()\n"
                      "raise ValueError('user error at the end')\n")
    proc = run_gradsight("trace", str(script), "--output", str(tmp_path / "run.db"))
    assert proc.returncode == 1
    assert "ValueError: user error at the end" in proc.stderr
    assert f'File "{script}", line 7' in proc.stderr
    assert "runpy" not in proc.stderr  # the traceback starts in the user's script
    with RunStore(tmp_path / "run.db") as run:
        assert run.last_step() == 2 and run.run()["status"] == "crashed"


def test_module_mode(tmp_path: Path) -> None:
    pkg = tmp_path / "mytrain"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import sys, torch\nm = torch.nn.Linear(3, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(4):\n    opt.zero_grad()\n    m(torch.ones(2, 3)).pow(2).mean().backward()\n    opt.step()\n"
        "print('ARGS', sys.argv[1:])\nsys.exit(4)\n")
    proc = run_gradsight("trace", "-m", "mytrain", "a", "b", "--output", str(tmp_path / "m.db"), cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "ARGS ['a', 'b']" in proc.stdout
    with RunStore(tmp_path / "m.db") as run:
        assert run.last_step() == 3


def test_break_without_debugger_ends_the_run(tmp_path: Path) -> None:
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", "grad_explode", "--at", "9", "--steps", "40",
                         "--break", "layer('fc1').grad_norm > 50", "--output", str(store))
    assert proc.returncode == 3, proc.stderr
    assert "breakpoint layer('fc1').grad_norm > 50 in 'fc1'" in proc.stderr
    assert "at step 9" in proc.stderr and "run stopped, snapshot in" in proc.stderr
    with RunStore(store) as run:
        assert run.last_step() == 9  # the step that fired is complete in the snapshot
        bps = run.events("breakpoint")
        assert [(e.step, e.module, e.name) for e in bps] == [(9, "fc1", "break")]
        assert "no debugger attached" in bps[0].message
        assert run.run()["status"] == "stopped"


@pytest.mark.parametrize(("expr", "column"), [("grad_norm >> 5", 11), ("layer('fc1').gradnorm > 1", 14), ("los > 1", 1)])
def test_bad_condition_is_a_clear_error(tmp_path: Path, expr: str, column: int) -> None:
    proc = run_gradsight("trace", str(FAULTS), "--break", expr, "--output", str(tmp_path / "run.db"))
    assert proc.returncode == 2
    assert f"column {column}:" in proc.stderr
    assert not (tmp_path / "run.db").exists()  # nothing ran


def test_bad_usage(tmp_path: Path) -> None:
    assert "no such script" in run_gradsight("trace", str(tmp_path / "missing.py")).stderr
    proc = run_gradsight("trace", str(FAULTS), "--every", "0")
    assert proc.returncode == 2 and "--every must be at least 1" in proc.stderr
    proc = run_gradsight("trace", str(FAULTS), "--trigger", "loss_spik")
    assert proc.returncode == 2 and "unknown trigger 'loss_spik'" in proc.stderr


def test_store_survives_sigkill(tmp_path: Path) -> None:
    store = tmp_path / "run.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    proc = subprocess.Popen(gradsight_cmd("trace", str(FAULTS), "--steps", "100000", "--sleep", "0.002", "--output", str(store)),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        seen = 0
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if store.exists():
                try:
                    with RunStore(store) as run:  # readable while being written
                        seen = run.last_step() or 0
                except (StoreError, sqlite3.OperationalError):
                    continue
                if seen >= 50:
                    break
        assert seen >= 50, "the traced run did not get going"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    with RunStore(store) as run:
        steps = run.steps()["step"].tolist()
        assert len(steps) >= seen + 1 and steps == list(range(len(steps)))  # every committed step, no hole
        _, norms = run.metric("grad_norm")
        assert len(norms) == len(steps)
        assert run.run()["status"] == "running"  # it never got to say otherwise
    proc = run_gradsight("diagnose", str(store))
    assert proc.returncode == 0 and "still being written (or its process died" in proc.stdout


def test_not_a_store_and_wrong_version(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("hello")
    with pytest.raises(StoreError, match="not an SQLite file"):
        RunStore(text)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a gradsight run store"):
        RunStore(other)
    old = old_schema_store(tmp_path / "old.db")
    with pytest.raises(StoreError, match=r"store schema 'gradsight.store/0', but this gradsight reads 'gradsight.store/2'"):
        RunStore(old)
    with pytest.raises(StoreError, match="no such file"):
        RunStore(tmp_path / "absent.db")
    assert sys.executable
