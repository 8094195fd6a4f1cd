"""torch.distributed as it is: torchrun with 2 gloo ranks on the CPU, DDP and FSDP2 (fully_shard)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradsight.store import RunStore

from .conftest import ROOT, run_gradsight

SCRIPT = Path(__file__).resolve().parent / "stacks" / "distributed.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(tmp_path: Path, *args: str, store: str = "run.db") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(_port()),
           "-m", "gradsight", "trace", str(SCRIPT), *args, "--output", store]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _norms(path: Path) -> tuple[list[str], np.ndarray]:
    with RunStore(path) as run:
        _, g = run.metric("grad_norm")
        return [m.name for m in run.modules()], g.astype(np.float64)


def test_a_nan_in_rank_1s_batch_is_diagnosed_as_starting_on_rank_1(tmp_path: Path) -> None:
    proc = _torchrun(tmp_path, "--ddp", "--nan-rank", "1", "--nan-at", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # every line gradsight prints says its rank
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("gradsight")]
    assert ours and all(ln.startswith(("gradsight [rank 0]", "gradsight [rank 1]")) for ln in ours), ours
    assert "gradsight [rank 1]: anomaly at step 5: nan_inf" in proc.stderr
    assert (tmp_path / "run.db").exists() and (tmp_path / "run.rank1.db").exists()
    diag = run_gradsight("diagnose", str(tmp_path / "run.db"), "--json")
    assert diag.returncode == 0, diag.stderr
    d = json.loads(diag.stdout)
    rc = d["root_cause"]
    assert (rc["module"], rc["kind"], rc["rank"]) == ("input", "nan_inf", 1)
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert any(n["rank"] == 1 and "start on rank 1 at step 5" in n["message"] for n in d["rank_findings"])
    text = run_gradsight("diagnose", str(tmp_path / "run.rank1.db")).stdout
    assert "root cause: input - nan_inf on rank 1" in text


def test_fsdp2_records_the_true_per_module_norms(tmp_path: Path) -> None:
    """Each rank holds a shard of every gradient; the recorded norms are those of the whole gradients, as the
    same training in one process gives them (the same global batches, averaged gradients)."""
    proc = _torchrun(tmp_path, "--fsdp", store="sharded.db")
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = run_gradsight("trace", str(SCRIPT), "--output", str(tmp_path / "single.db"), cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    names, one = _norms(tmp_path / "single.db")
    for store in ("sharded.db", "sharded.rank1.db"):
        sharded_names, sharded = _norms(tmp_path / store)
        assert sharded_names == names and sharded.shape == one.shape == (12, len(names))
        layers = [names.index(n) for n in ("0", "2", "4")]
        np.testing.assert_allclose(sharded[:, layers], one[:, layers], rtol=1e-4)
        np.testing.assert_allclose(sharded[:, 0], one[:, 0], rtol=1e-4)  # the model's own


def test_a_breakpoint_on_one_rank_ends_every_rank_cleanly(tmp_path: Path) -> None:
    proc = _torchrun(tmp_path, "--ddp", "--spike-rank", "1", "--spike-at", "4", "--break", "loss > 1000")
    assert "Connection closed" not in proc.stderr
    assert f'File "{SCRIPT}"' not in proc.stderr  # no rank died in the script (torchrun's agent prints its own traceback)
    for rank in (0, 1):  # the same words on both ranks, then each exits with the breakpoint's status
        assert f"gradsight [rank {rank}]: a breakpoint held on rank 1 at step 4; every rank stopped" in proc.stderr
    assert "exitcode  : 3" in proc.stderr and "exitcode  : 1" not in proc.stderr
    for store in ("run.db", "run.rank1.db"):
        with RunStore(tmp_path / store) as run:
            assert run.run()["status"] == "stopped" and run.last_step() == 4


def test_ranks_keep_sibling_names_when_a_run_is_repeated(tmp_path: Path) -> None:
    for _ in range(2):
        proc = _torchrun(tmp_path, "--ddp", "--steps", "3")
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["run-1.db", "run-1.rank1.db", "run.db", "run.rank1.db"]
    diag = json.loads(run_gradsight("diagnose", str(tmp_path / "run-1.db"), "--json").stdout)
    assert [Path(r["path"]).name for r in diag["ranks"]] == ["run-1.db", "run-1.rank1.db"]


@pytest.mark.parametrize("flag", ["--ddp"])
def test_ddp_names_are_the_users(tmp_path: Path, flag: str) -> None:
    proc = _torchrun(tmp_path, flag, "--steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    names, _ = _norms(tmp_path / "run.db")
    assert names == ["", "0", "1", "2", "3", "4"]  # not module.0, module.1, ...
