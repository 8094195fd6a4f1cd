"""gradsight never harms the user's run or files: run as users run it, beside the same script without gradsight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradsight.store import RunStore

from .conftest import ROOT, run_gradsight

TRAIN = """\
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(12):
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print("done")
"""


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _plain(script: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], cwd=script.parent, capture_output=True, text=True, timeout=timeout)


def test_output_never_writes_over_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN)
    csv = tmp_path / "results.csv"
    csv.write_bytes(b"epoch,acc\n1,0.5\n")
    proc = run_gradsight("trace", str(script), "--output", str(csv), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "results.csv: exists and is not a gradsight run store; gradsight never writes over it" in proc.stderr
    assert csv.read_bytes() == b"epoch,acc\n1,0.5\n"
    source = script.read_bytes()
    proc = run_gradsight("trace", str(script), "--output", str(script), cwd=tmp_path)
    assert proc.returncode == 2 and "the script being run" in proc.stderr and "Traceback" not in proc.stderr
    assert script.read_bytes() == source


def test_an_existing_store_gets_a_new_name_unless_overwrite(tmp_path: Path) -> None:
    script = _script(tmp_path, TRAIN)
    first = run_gradsight("trace", str(script), "--output", "run.db", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_gradsight("trace", str(script), "--output", "run.db", cwd=tmp_path)
    assert second.returncode == 0 and "run store " + str(tmp_path / "run-1.db") in second.stderr
    with RunStore(tmp_path / "run.db") as a, RunStore(tmp_path / "run-1.db") as b:
        assert a.last_step() == b.last_step() == 11
        started = a.run()["started"]
    third = run_gradsight("trace", str(script), "--output", "run.db", "--overwrite", cwd=tmp_path)
    assert third.returncode == 0 and not (tmp_path / "run-2.db").exists()
    with RunStore(tmp_path / "run.db") as a:
        assert a.run()["started"] > started


def test_a_traced_model_can_be_copied_saved_and_averaged(tmp_path: Path) -> None:
    script = _script(tmp_path, """\
        import copy, pickle, sys
        import torch
        from torch import nn
        from torch.optim.swa_utils import AveragedModel
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ema = AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
        for step in range(20):
            x = torch.randn(16, 8)
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
            ema.update_parameters(model)
            if step == 10:
                twin = copy.deepcopy(model)
                pickle.dumps(opt)
                torch.save(model, sys.argv[1])
                torch.save(opt.state_dict(), sys.argv[1] + ".opt")
        x = torch.randn(4, 8)
        assert torch.equal(twin(x), twin(x)) and ema(x).shape == (4, 1)
        print("ok")
        """)
    saved = tmp_path / "model.pt"
    proc = run_gradsight("trace", str(script), str(saved), "--output", str(tmp_path / "run.db"), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    # the saved model loads where gradsight is not even importable
    check = subprocess.run([sys.executable, "-I", "-c", "import sys, torch; m = torch.load(sys.argv[1], weights_only=False); "
                            "print(type(m).__name__, 'gradsight' in sys.modules)", str(saved)], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and check.stdout.strip() == "Sequential False", check.stderr
    with RunStore(tmp_path / "run.db") as run:
        assert run.last_step() == 19


COUNTING = """\
import torch
from torch import nn
calls = {"forward": 0}
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 1)
    def forward(self, x):
        calls["forward"] += 1
        print("forward", calls["forward"])
        return self.fc2(torch.relu(self.fc1(x)))
torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(12):
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    if step == 6:
        loss = loss * 1e6  # an anomaly: gradsight captures around it
    opt.zero_grad(); loss.backward(); opt.step()
print("calls", calls["forward"])
"""


def test_user_code_runs_once_even_when_an_anomaly_is_captured(tmp_path: Path) -> None:
    script = _script(tmp_path, COUNTING)
    plain = _plain(script)
    traced = run_gradsight("trace", str(script), "--output", str(tmp_path / "run.db"), "--every", "1", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert "anomaly at step 6" in traced.stderr
    assert traced.stdout == plain.stdout and "calls 12" in plain.stdout  # the same prints, the same forward calls
    with RunStore(tmp_path / "run.db") as run:
        assert {t.role for t in run.tensors()} >= {"gradient", "activation", "input"}


def test_watch_inside_a_traced_script_joins_the_trace(tmp_path: Path) -> None:
    script = _script(tmp_path, """\
        import torch
        from torch import nn
        import gradsight
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with gradsight.watch(model, opt, store="mine.db", every=5) as run:
            for step in range(15):
                x = torch.randn(16, 8)
                loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
                opt.zero_grad(); loss.backward(); opt.step()
        print(run.step, run.store.endswith("traced.db"))
        """)
    proc = run_gradsight("trace", str(script), "--output", "traced.db", cwd=tmp_path, env={"PYTHONPATH": str(ROOT / "pyserver")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "15 True" and not (tmp_path / "mine.db").exists()
    with RunStore(tmp_path / "traced.db") as run:
        assert run.last_step() == 14 and run.run()["status"] == "finished"


LONG = """\
import sys, time
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while True:
    x = torch.randn(16, 8)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    step += 1
    if step == 20:
        print("ready", flush=True)
    time.sleep(0.005)
"""


def _start(cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    # as from a terminal: a shell's background job inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt (the test would measure the runner, not the script)
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "ready\n", proc.stderr.read() if proc.stderr else ""
    time.sleep(0.2)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_signals_end_the_script_as_without_gradsight(tmp_path: Path, sig: signal.Signals) -> None:
    script = _script(tmp_path, LONG)
    ended = {}
    for mode, cmd in (("plain", [sys.executable, str(script)]),
                      ("traced", [sys.executable, "-m", "gradsight", "trace", str(script), "--output", str(tmp_path / "run.db")])):
        proc = _start(cmd, tmp_path)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        ended[mode] = (proc.returncode, err)
    assert ended["traced"][0] == ended["plain"][0] == -sig  # died by the signal, both
    if sig == signal.SIGINT:  # Python's own traceback, through the user's frame, ending in KeyboardInterrupt
        for _, err in ended.values():
            assert err.rstrip().endswith("KeyboardInterrupt") and f'File "{script}"' in err, err
    with RunStore(tmp_path / "run.db") as run:  # and the store was closed first
        assert run.run()["status"] == ("terminated" if sig == signal.SIGTERM else "interrupted")
        assert (run.last_step() or 0) >= 19
