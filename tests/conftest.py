from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "scripts"
FAULTS = SCRIPTS / "faults.py"


def gradsight_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gradsight", *args]


def run_gradsight(*args: str, cwd: str | Path | None = None, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver"), **(env or {})}
    return subprocess.run(gradsight_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env)


def trace_and_diagnose(tmp_path: Path, source: str, name: str = "train.py") -> tuple[dict[str, Any], str, Path]:
    """Write ``source`` as a script, ``gradsight trace`` it for real and ``diagnose --json`` its store:
    (the diagnosis, what the script printed, the store)."""
    script = tmp_path / name
    script.write_text(source)
    store = tmp_path / "run.db"
    traced = run_gradsight("trace", str(script), "--output", str(store), "--quiet", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr[-2000:]
    out = run_gradsight("diagnose", str(store), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout), traced.stdout, store


def old_schema_store(path: Path) -> Path:
    """A file that claims to be a store of an older schema."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('schema', 'gradsight.store/0')")
    con.commit()
    con.close()
    return path


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "run.db"


def run_that_warned_of_overhead(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run at full detail whose runtime warned that gradsight slowed its steps (the warning's
    thresholds lowered so that any cost of its own is reported: steps 20-39 are judged)."""
    import torch
    from torch import nn

    import gradsight
    from gradsight.runtime import owntime

    monkeypatch.setattr(owntime, "OVERHEAD_WINDOW", 20)
    monkeypatch.setattr(owntime, "OVERHEAD_SHARE", 0.0)
    monkeypatch.setattr(owntime, "OVERHEAD_MIN_MS", 0.0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with gradsight.watch(model, opt, store=store, every=1, triggers="none"):
        for _ in range(50):
            x = torch.randn(8, 16)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
