"""Each trigger fires at the step where its fault appears, on a real training run traced unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gradsight.store import RunStore

from .conftest import FAULTS, run_gradsight

FAULTS_AND_STEPS = [
    ("loss_spike", 23),
    ("grad_explode", 31),
    ("nan_inf", 27),
    ("dead_units", 35),
    ("vanishing", 29),
]


@pytest.mark.parametrize(("fault", "at"), FAULTS_AND_STEPS)
def test_trigger_fires_at_the_fault_step(tmp_path: Path, fault: str, at: int) -> None:
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", fault, "--at", str(at), "--steps", "50", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"gradsight: 50 steps, .*; its own work added \d+% to the run's time", proc.stderr), proc.stderr
    with RunStore(store) as run:
        triggers = run.events("trigger")
        assert triggers, proc.stderr
        assert min(e.step for e in triggers if e.step is not None) == at, [(e.step, e.name) for e in triggers]
        fired = {e.name: e.step for e in triggers}
        assert fired.get(fault) == at, fired
        assert f"anomaly at step {at}: " in proc.stderr
        assert int(run.last_step() or 0) == 49
        # the trigger step is captured in full: gradients and weights of the worst modules and the inputs; the
        # activations come from the next forward pass (the user's forward is never run again)
        roles = {(t.role, t.step) for t in run.tensors()}
        assert ("gradient", at) in roles and ("weight", at) in roles and ("activation", at + 1) in roles
        assert ("input", at) in roles and ("input", at - 1) in roles
        # and the capture window after it has activation statistics every step
        steps = run.steps()
        window = steps["capture"][(steps["step"] > at) & (steps["step"] <= at + 5)]
        assert window.tolist() == [1.0] * 5
        sampled_steps, act_max = run.metric("act_max")
        assert set(range(at + 1, at + 6)) <= set(sampled_steps.tolist())


def test_healthy_run_fires_nothing(tmp_path: Path) -> None:
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", "none", "--steps", "80", "--every", "1", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    with RunStore(store) as run:
        assert run.events("trigger") == []
        # nothing captured but one ordinary step's activations (and its input), kept to set an anomaly beside
        kept = run.tensors()
        assert {t.role for t in kept} == {"activation", "input"} and len({t.step for t in kept}) == 1
        assert sum(t.nbytes for t in kept) <= 4 * 2**20
        losses = run.steps()["loss"]
        assert len(losses) == 80 and losses[-1] < losses[0] / 3  # it really trained


def test_condition_trigger(tmp_path: Path) -> None:
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", "grad_explode", "--at", "12", "--steps", "20",
                         "--trigger", "layer('fc1').grad_norm > 3 * mean(layer('fc1').grad_norm, 5)", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    with RunStore(store) as run:
        events = run.events("trigger")
        assert [(e.step, e.module) for e in events] == [(12, "fc1")]


def test_store_holds_modules_metrics_and_lines(tmp_path: Path) -> None:
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--steps", "12", "--every", "4", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    source = FAULTS.read_text().splitlines()
    with RunStore(store) as run:
        info = run.run()
        assert info["status"] == "finished" and info["model"] == "Net" and info["optimizer"] == "Adam"
        assert info["torch_version"].startswith("2.13")
        mods = {m.name: m for m in run.modules()}
        assert list(mods) == ["", "fc1", "act", "fc2", "act2", "out"]
        for name in ("fc1", "fc2", "out", "act"):
            m = mods[name]
            assert m.file == str(FAULTS) and m.line is not None
            assert source[m.line - 1].strip().startswith(f"self.{name} = nn."), (name, m.line)
        assert source[mods[""].line - 1].strip() == "model = Net()"  # type: ignore[operator]  # the model's own line (issue 17)
        assert [mods[n].forward_order for n in ("", "fc1", "act", "fc2", "act2", "out")] == [0, 1, 2, 3, 4, 5]
        assert mods["fc1"].n_params == 16 * 64 + 64
        steps = run.steps()
        assert steps["step"].tolist() == list(range(12))
        assert np.all(np.isfinite(steps["loss"])) and np.all(steps["lr"] == 1e-2)
        # step 0 (gradients; its forward ran before the model was known), step 1 for its activations, then every 4th
        assert steps["sampled"].tolist() == [1, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
        assert steps["grads_zeroed"].tolist() == [1.0] * 12
        st, gn = run.metric("grad_norm")
        assert gn.shape == (12, 6)
        # the root's norm is the norm over all its layers
        assert np.allclose(gn[:, 0], np.sqrt(np.nansum(gn[:, [1, 3, 5]] ** 2, axis=1)), rtol=1e-4)
        assert np.isnan(gn[:, 2]).all()  # ReLU has no parameters
        st, dead = run.metric("dead_frac")
        # traced unchanged, the model is found at the first optimizer step, after its forward (never run again):
        # the next step's forward is measured instead
        assert st.tolist() == [1, 4, 8] and np.all(dead[:, 2] < 0.3)
        st, ratio = run.metric("update_ratio")
        assert st.tolist() == [0, 1, 4, 8] and np.all((ratio[:, 1] > 1e-4) & (ratio[:, 1] < 0.5))
        params = run.params()
        assert {p["name"] for p in params} == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "out.weight", "out.bias"}
        assert all(p["in_optimizer"] == 1 and p["got_grad"] == 1 and p["trainable"] == 1 for p in params)
