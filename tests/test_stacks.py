"""The stacks people train with, for real: HF Trainer, Lightning, accelerate, GANs, training phases,
torch.compile, activation checkpointing, a custom autograd.Function. Scripts in tests/stacks/."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from gradsight.store import RunStore

from .conftest import ROOT, run_gradsight

STACKS = Path(__file__).resolve().parent / "stacks"


def _trace(tmp_path: Path, script: str, *args: str, store: str = "run.db") -> tuple[Path, str, str]:
    db = tmp_path / store
    proc = run_gradsight("trace", str(STACKS / script), *args, "--output", str(db), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "internal error" not in proc.stderr, proc.stderr
    return db, proc.stdout, proc.stderr


def _diagnose(db: Path) -> dict:
    proc = run_gradsight("diagnose", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _global_step(out: str) -> int:
    return int(next(line for line in out.splitlines() if line.startswith("global_step")).split()[1])


@pytest.mark.parametrize(("options", "clip"), [(["--gas", "4", "--max-grad-norm", "1.0"], 1.0), (["--max-grad-norm", "0", "--bf16"], None)],
                         ids=["clip-accumulation4", "no-clip-bf16"])
def test_hf_trainer_records_exactly_its_optimizer_steps(tmp_path: Path, options: list[str], clip: float | None) -> None:
    db, out, _ = _trace(tmp_path, "hf_trainer.py", *options)
    with RunStore(db) as run:
        steps = run.steps()
        assert len(steps["step"]) == _global_step(out) == 12  # no phantom steps from the micro-batches
        assert steps["n_backward"].tolist() == [4 if "--gas" in options else 1] * 12
        assert np.all(np.isfinite(steps["loss"])) and abs(float(np.median(steps["loss"])) - math.log(2)) < 0.1  # the unscaled mean CE
        if clip is None:
            assert np.isnan(steps["clip_norm"]).all()
        else:
            assert (steps["clip_norm"] == clip).all() and (steps["grad_norm_clipped"] <= clip + 1e-5).all()
            assert (steps["grad_norm"] >= steps["grad_norm_clipped"] - 1e-6).all()  # read before the clipping
        assert run.run()["model"] == "BertForSequenceClassification"


def test_hf_trainer_nan_put_into_a_weight_is_caught_where_it_starts(tmp_path: Path) -> None:
    db, _, err = _trace(tmp_path, "hf_trainer.py", "--nan-at", "6")
    assert "anomaly at step 6: nan_inf" in err
    rc = _diagnose(db)["root_cause"]
    assert rc["module"] == "bert.encoder.layer.0.attention.self.query" and rc["kind"] == "nan_inf"


def test_hf_callback_watches_a_trainer_run_without_trace(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    import subprocess

    proc = subprocess.run([sys.executable, str(STACKS / "hf_trainer.py"), "--gas", "2", "--callback", str(tmp_path / "cb.db")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with RunStore(tmp_path / "cb.db") as run:
        steps = run.steps()
        assert len(steps["step"]) == 12 and steps["n_backward"].tolist() == [2] * 12
        assert run.run()["status"] == "finished" and run.run()["optimizer"] == "AdamW"


@pytest.mark.parametrize("mode", [[], ["--manual"]], ids=["automatic", "manual"])
def test_lightning_records_every_step_with_loss_and_gradients(tmp_path: Path, mode: list[str]) -> None:
    db, out, _ = _trace(tmp_path, "lightning_loop.py", *mode, "--clip", "1.0")
    with RunStore(db) as run:
        steps = run.steps()
        assert len(steps["step"]) == _global_step(out) == 30
        assert np.all(np.isfinite(steps["loss"])) and np.all(np.isfinite(steps["grad_norm"])) and np.all(steps["grad_norm"] > 0)
        _, per_module = run.metric("grad_norm")
        assert np.isfinite(per_module[:, 1]).all()
        if not mode:
            assert (steps["clip_norm"] == 1.0).all()  # Lightning's gradient_clip_val, inside its closure


def test_a_diverging_lightning_run_is_caught_and_diagnosed(tmp_path: Path) -> None:
    db, _, err = _trace(tmp_path, "lightning_loop.py", "--lr", "0.5")
    assert "anomaly at step" in err
    d = _diagnose(db)
    assert d["root_cause"]["module"] == "optimizer" and d["root_cause"]["kind"] == "learning_rate_too_high"


@pytest.mark.parametrize("mode", [[], ["--manual"]], ids=["automatic", "manual"])
def test_lightning_callback_watches_a_run_without_trace(tmp_path: Path, mode: list[str]) -> None:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    proc = subprocess.run([sys.executable, str(STACKS / "lightning_loop.py"), *mode, "--callback", str(tmp_path / "cb.db")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with RunStore(tmp_path / "cb.db") as run:
        steps = run.steps()
        assert len(steps["step"]) == 30 and np.isfinite(steps["loss"]).all() and (steps["grad_norm"] > 0).all()
        assert [m.name for m in run.modules()][:2] == ["", "0"]  # the LightningModule's net: named as gradsight trace names it


def test_accelerate_with_accumulation(tmp_path: Path) -> None:
    db, out, _ = _trace(tmp_path, "accelerate_loop.py")
    means = json.loads(out.strip().splitlines()[-1])
    with RunStore(db) as run:
        steps = run.steps()
        assert len(steps["step"]) == len(means) == 10 and steps["n_backward"].tolist() == [4] * 10
        assert np.allclose(steps["loss"], means, rtol=1e-6)
        assert (steps["clip_norm"] == 1.0).all()


def test_a_gans_two_networks_are_both_recorded(tmp_path: Path) -> None:
    db, _, _ = _trace(tmp_path, "gan.py")
    with RunStore(db) as run:
        names = {m.name for m in run.modules()}
        assert {"netG", "netG.0", "netG.2", "netD", "netD.0", "netD.2"} <= names
        assert [m["name"] for m in run.run()["models"]] == ["netG", "netD"] or [m["name"] for m in run.run()["models"]] == ["netD", "netG"]
        assert len(run.steps()["step"]) == 40
        (other,) = run.model_steps().values()  # the network whose optimizer steps second
        assert other["step"].tolist() == list(range(40)) and np.isfinite(other["loss"]).all()
        _, g = run.metric("grad_norm")
        ids = {m.name: m.id for m in run.modules()}
        assert np.isfinite(g[:, ids["netG.0"]]).all() and np.isfinite(g[:, ids["netD.0"]]).all()


def test_a_lightning_gan_through_the_callback_records_both_networks_by_name(tmp_path: Path) -> None:
    """Two optimizers in configure_optimizers, manual optimization, the discriminator stepped before the generator
    (the first optimizer, the run's clock): each network is a model named by its attribute, and every one of the
    discriminator's steps is recorded at the step it belongs to."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    proc = subprocess.run([sys.executable, str(STACKS / "lightning_gan.py"), "--callback", str(tmp_path / "cb.db")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with RunStore(tmp_path / "cb.db") as run:
        assert [m["name"] for m in run.run()["models"]] == ["netG", "netD"]
        assert {"netG.0", "netG.2", "netD.0", "netD.2"} <= {m.name for m in run.modules()}
        assert len(run.steps()["step"]) == 15  # 30 optimizer steps in Lightning's global_step: 15 of each network
        (other,) = run.model_steps().values()
        assert other["step"].tolist() == list(range(15)) and np.isfinite(other["loss"]).all()


def test_a_second_training_phase_is_a_new_section(tmp_path: Path) -> None:
    db, _, _ = _trace(tmp_path, "two_phases.py")
    with RunStore(db) as run:
        models = run.run()["models"]
        assert [(m["name"], m["first_step"]) for m in models] == [("teacher", 0), ("student", 20)]
        assert run.steps()["step"].tolist() == list(range(35))
        ids = {m.name: m.id for m in run.modules()}
        steps, g = run.metric("grad_norm")
        assert steps[np.isfinite(g[:, ids["teacher.0"]])].tolist() == list(range(20))
        assert steps[np.isfinite(g[:, ids["student.0"]])].tolist() == list(range(20, 35))
    # the diagnosis judges the last phase: the student's 15 steps, named as such
    from gradsight.analysis.diagnose import diagnose

    d = diagnose(db)
    assert d.run["phase"] == {"models": ["student"], "from_step": 20, "phases": 2}
    assert d.run["steps"] == 15


def test_torch_compile_adds_no_graph_break_and_keeps_statistics(tmp_path: Path) -> None:
    import subprocess

    plain = subprocess.run([sys.executable, str(STACKS / "compiled.py")], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-2000:]
    db, out, _ = _trace(tmp_path, "compiled.py", "--every", "1")
    assert out.strip().splitlines()[-1] == plain.stdout.strip().splitlines()[-1] == "graph_breaks 0 graphs 1"
    with RunStore(db) as run:
        names = [m.name for m in run.modules()]
        assert names == ["", "0", "1", "2", "3", "4"]  # the user's names, not _orig_mod.*
        steps, g = run.metric("grad_norm")
        assert len(steps) == 30 and np.isfinite(g[:, [1, 3, 5]]).all()
        _, act = run.metric("act_max")
        assert np.isfinite(act[:, 0]).all()  # the model's output is measured (compiled graphs run no Python hooks inside)


def test_activation_checkpointing(tmp_path: Path) -> None:
    db, out, _ = _trace(tmp_path, "checkpointed.py", "--every", "5")
    with RunStore(db) as run:
        steps = run.steps()
        assert len(steps["step"]) == 20 and np.isfinite(steps["loss"]).all()
        assert abs(steps["loss"][-1] - float(out.split()[-1])) < 1e-3
        ids = {m.name: m.id for m in run.modules()}
        _, act = run.metric("act_std")
        assert np.isfinite(act[:, ids["blocks.1.fc"]]).all()


def test_a_custom_function_whose_backward_makes_an_inf_is_traced_to_its_module(tmp_path: Path) -> None:
    db, _, err = _trace(tmp_path, "custom_function.py")
    assert "anomaly at step 0: nan_inf" in err
    rc = _diagnose(db)["root_cause"]
    assert rc["module"] == "act" and rc["kind"] == "nan_inf"  # where it starts, not fc1 (its victim)


@pytest.mark.parametrize("how", ["trace", "callback"])
def test_lightning_blocks_in_a_plain_list_are_named_and_the_fix_registers_them(tmp_path: Path, how: str) -> None:
    """configure_optimizers gives Adam self.parameters(), which a plain list's layers are not in: named on the
    model (not a weakref proxy's type), the model's health counts it, and the fix, validated by a re-run, makes the
    list an nn.ModuleList."""
    import subprocess

    if how == "trace":
        db, _, _ = _trace(tmp_path, "lightning_plain_list.py")
    else:
        db = tmp_path / "cb.db"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
        proc = subprocess.run([sys.executable, str(STACKS / "lightning_plain_list.py"), "--callback", str(db)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    d = _diagnose(db)
    assert d["run"]["model"] == "Reg"
    assert (d["root_cause"]["module"], d["root_cause"]["kind"]) == ("", "not_updated"), d["root_cause"]
    assert "blocks is a plain Python list holding 3 modules" in d["evidence"]
    assert d["health"] <= 50
    if how == "trace":  # (the callback's run has the script's argv too, but one re-run shows the fix)
        fix = d["fixes"][0]
        assert fix["id"] == "register-layer-container" and "nn.ModuleList([nn.Linear(32, 32)" in fix["snippet"], fix
        done = run_gradsight("validate", str(db), "--fix", fix["id"], "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout)["fixes"][0]
        assert got["verdict"] == "validated" and got["loss"] < got["loss_before"], got
