"""The explicit API: gradsight.watch(model, optimizer) in a plain script, and what it never does to training."""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import gradsight
from gradsight.runtime import gradstats, nanorigin, owntime, session
from gradsight.store import RunStore


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, zero: bool = True) -> list[float]:
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 8, generator=gen)
        if zero:
            opt.zero_grad()
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_watch_records_without_changing_training(tmp_path: Path) -> None:
    plain_model = _mlp()
    plain = _train(plain_model, torch.optim.SGD(plain_model.parameters(), lr=0.01), 20)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradsight.watch(model, opt, store=tmp_path / "run.db", every=1) as handle:
        watched = _train(model, opt, 20)
    assert watched == plain  # bit-identical losses: gradsight only reads
    assert handle.step == 20 and handle.anomalies == []
    with RunStore(handle.store) as run:
        assert np.allclose(run.steps()["loss"], plain)
        assert run.run()["loss_source"] == "backward"
        _, sat = run.metric("sat_frac")
        assert np.isfinite(sat[:, 2]).all() and np.isnan(sat[:, 1]).all()  # measured on the Tanh only
        assert run.run()["status"] == "finished"


def test_frozen_and_not_updated_parameters(tmp_path: Path) -> None:
    model = _mlp()
    model[0].weight.requires_grad_(False)  # frozen
    params = [p for n, p in model.named_parameters() if not n.startswith("4.")]  # layer 4 forgotten
    opt = torch.optim.Adam([p for p in params if p.requires_grad], lr=1e-3)
    with gradsight.watch(model, opt, store=tmp_path / "run.db", every=2) as handle:
        _train(model, opt, 6)
    with RunStore(handle.store) as run:
        by_name = {p["name"]: p for p in run.params()}
        assert by_name["0.weight"]["trainable"] == 0 and by_name["0.weight"]["got_grad"] == 0
        assert by_name["4.weight"]["got_grad"] == 1 and by_name["4.weight"]["in_optimizer"] == 0
        assert by_name["2.weight"]["in_optimizer"] == 1
        warn = [e for e in run.events("warning") if e.name == "not_updated"]
        assert len(warn) == 1 and "4.weight" in warn[0].message
        st, ratio = run.metric("update_ratio")
        names = [m.name for m in run.modules()]
        assert np.isnan(ratio[:, names.index("4")]).all()  # never stepped
        assert (ratio[:, names.index("2")] > 0).all()


def test_grads_not_zeroed_is_recorded(tmp_path: Path) -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with gradsight.watch(model, opt, store=tmp_path / "run.db") as handle:
        _train(model, opt, 5, zero=False)
    with RunStore(handle.store) as run:
        assert run.steps()["grads_zeroed"].tolist() == [1, 0, 0, 0, 0]


def test_explicit_loss_and_manual_steps(tmp_path: Path) -> None:
    model = _mlp()
    with gradsight.watch(model, store=tmp_path / "run.db") as handle:
        for i in range(4):
            loss = model(torch.ones(4, 8)).pow(2).mean()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
                    p.grad = None
            handle.log(loss=100.0 + i)
            handle.mark_step()
    with RunStore(handle.store) as run:
        assert run.steps()["loss"].tolist() == [100.0, 101.0, 102.0, 103.0]
        assert run.run()["loss_source"] == "explicit"


def test_internal_error_degrades_and_training_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated bug in gradsight")

    monkeypatch.setattr(gradstats, "queue_grads", broken)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradsight.watch(model, opt, store=tmp_path / "run.db") as handle:
        losses = _train(model, opt, 10)
    assert len(losses) == 10 and losses[-1] < losses[0]
    err = capfd.readouterr().err
    assert err.count("gradsight: internal error in step") == 1  # reported once
    with RunStore(handle.store) as run:
        assert [e.name for e in run.events("warning")] == ["internal_error"]


def test_user_exceptions_pass_through_unchanged(tmp_path: Path) -> None:
    class Bad(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyError("from the user's forward")

    model = Bad()
    with pytest.raises(KeyError, match="from the user's forward"):
        with gradsight.watch(model, store=tmp_path / "run.db", every=1):
            model(torch.ones(1, 2))
    with RunStore(tmp_path / "run.db") as run:
        assert run.run()["status"] == "crashed"
    # and the hooks are gone afterwards
    assert torch.autograd.backward.__module__ == "torch.autograd"


def test_a_second_watch_joins_the_running_session(tmp_path: Path) -> None:
    """watch() while a session runs (what a traced script that watches itself does) joins it: one store,
    the inner handle's close leaves the session running."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradsight.watch(model, opt, store=tmp_path / "a.db") as outer:
        with gradsight.watch(model, opt, store=tmp_path / "b.db") as inner:
            assert inner.store == outer.store
            _train(model, opt, 3)
        _train(model, opt, 2)
        assert outer.step == 5 and session.ACTIVE is not None
    assert not (tmp_path / "b.db").exists() and session.ACTIVE is None
    with pytest.raises(TypeError, match="must be a torch.nn.Module"):
        gradsight.watch("model", store=tmp_path / "c.db")  # type: ignore[arg-type]


@pytest.mark.parametrize("explode_at", [30, 57])
def test_deferred_reading_reports_the_same_run(tmp_path: Path, explode_at: int) -> None:
    """Reading each step's norms a step later (the default on CUDA, forced here on the CPU) records the
    same steps, values and anomaly steps as reading them at once; only the capture moves a step on."""

    def run(defer: bool) -> tuple[RunStore, list[tuple[int, str]]]:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(1)
        handle = gradsight.watch(model, opt, store=tmp_path / f"defer-{defer}.db", every=25, defer=defer)
        for step in range(60):
            x = torch.randn(32, 8, generator=gen)
            opt.zero_grad()
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            (loss * (1e4 if step == explode_at else 1.0)).backward()
            opt.step()
        handle.close()
        return RunStore(handle.store), handle.anomalies

    (now, now_anomalies), (later, later_anomalies) = run(False), run(True)
    with now, later:
        a, b = now.steps(), later.steps()
        assert list(b["step"]) == list(range(60)) == list(a["step"])  # the last step too, written at close
        for col in ("loss", "grad_norm", "n_backward"):
            assert np.allclose(a[col], b[col], equal_nan=True), col
        window, later_window = set(np.flatnonzero(a["capture"])), set(np.flatnonzero(b["capture"]))
        assert explode_at in window and window <= later_window  # the window of a deferred trigger ends a step later
        assert later_window - window <= {explode_at + 6}
        assert (explode_at, "grad_explode") in now_anomalies and now_anomalies == later_anomalies
        assert [(e.step, e.name) for e in later.events() if e.kind == "trigger"] == later_anomalies
        # the tensors were captured from the step at hand: the next one, when the trigger step was deferred
        captured = {t.step for t in now.tensors() if t.role == "gradient"}
        assert explode_at in captured
        assert {t.step for t in later.tensors() if t.role == "gradient"} == captured - {explode_at} | {explode_at + 1}


def test_breakpoints_keep_deferred_reading_off(tmp_path: Path) -> None:
    """A --break condition stops the run on the step where it holds, deferral asked for or not."""
    from gradsight.runtime.session import GradsightStop

    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    handle = gradsight.watch(model, opt, store=tmp_path / "run.db", defer=True, breaks=["grad_norm > 1000"])
    with pytest.raises(GradsightStop, match="at step 12"):
        for step in range(40):
            x = torch.randn(32, 8, generator=gen)
            opt.zero_grad()
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            (loss * (1e4 if step == 12 else 1.0)).backward()
            opt.step()
    assert handle.step == 13
    handle.close()
    with RunStore(handle.store) as run:
        assert run.steps()["step"].max() == 12


def test_a_persistent_condition_seen_on_sampled_steps_fires_once(tmp_path: Path) -> None:
    """Half the hidden units dead for the whole run: one dead_units anomaly (and one capture window),
    not one at every sampled step."""
    model = _mlp()
    with torch.no_grad():
        model[2].bias[:8] = -100.0  # these ReLU units never fire, and get no gradient to come back
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradsight.watch(model, opt, store=tmp_path / "run.db", every=10) as handle:
        _train(model, opt, 60)
    assert [k for _, k in handle.anomalies] == ["dead_units"]
    with RunStore(handle.store) as run:
        sampled = run.steps()["sampled"]
        assert sampled.sum() >= 6  # seen on every sampled step
        relu = next(m.id for m in run.modules() if m.name == "3")
        dead = run.metric("dead_frac")[1][:, relu]
        assert len(dead) == sampled.sum() and dead.min() >= 0.5


def test_update_ratio_of_a_large_layer_from_its_sample(tmp_path: Path) -> None:
    """A 512x512 layer's update ratio comes from a strided sample of 1 in 16 weights, scaled up:
    it matches the ratio computed from whole copies of the weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    big = model[2]
    assert big.weight.numel() > gradstats.UPDATE_SAMPLE
    with torch.no_grad():  # the bias's own ratio differs from the weight's: each sample must be scaled to its tensor
        big.bias.fill_(10.0)
    with gradsight.watch(model, opt, store=tmp_path / "run.db", every=10, triggers="none") as handle:
        for step in range(11):
            before = [p.detach().clone() for p in big.parameters()]
            x = torch.randn(32, 64)
            opt.zero_grad()
            (model(x) - x[:, :1]).pow(2).mean().backward()
            opt.step()
            if step == 10:
                delta = sum(float((p.detach() - b).abs().sum()) for p, b in zip(big.parameters(), before))
                exact = delta / sum(float(b.abs().sum()) for b in before)
    with RunStore(handle.store) as run:
        steps, ratio = run.metric("update_ratio")
        layer = next(m.id for m in run.modules() if m.name == "2")
        assert list(steps) == [0, 10]
        assert ratio[-1, layer] == pytest.approx(exact, rel=0.05)


def test_update_ratio_at_every_step_of_full_detail(tmp_path: Path) -> None:
    """At full detail the copies of the weights before each step are reused from step to step: every
    step's ratio still equals mean|dW| / mean|W| of that step, also after a layer's weight got new
    storage mid-run."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    layer = model[0]
    exact: list[float] = []
    with gradsight.watch(model, opt, store=tmp_path / "run.db", every=1, triggers="none") as handle:
        for step in range(12):
            if step == 6:  # the weight's storage replaced (as a checkpoint load or a re-initialisation does)
                with torch.no_grad():
                    layer.weight.data = torch.randn(16, 8) * 0.3
            before = [p.detach().clone() for p in layer.parameters()]
            x = torch.randn(16, 8)
            opt.zero_grad()
            (model(x) - x[:, :1]).pow(2).mean().backward()
            opt.step()
            delta = sum(float((p.detach() - b).abs().sum()) for p, b in zip(layer.parameters(), before))
            exact.append(delta / sum(float(b.abs().sum()) for b in before))
    with RunStore(handle.store) as run:
        steps, ratio = run.metric("update_ratio")
        first = next(m.id for m in run.modules() if m.name == "0")
    assert list(steps) == list(range(12))
    assert ratio[:, first] == pytest.approx(np.array(exact), rel=1e-4)


def _reference_stats(module: nn.Module, inp: torch.Tensor, out: torch.Tensor) -> dict[str, float]:
    """What each activation statistic means, computed the plain way."""
    x = out.detach().double()
    unit = 1 if x.dim() >= 4 else x.dim() - 1

    def dead(t: torch.Tensor) -> float:
        return float((t != 0).movedim(unit, -1).reshape(-1, t.shape[unit]).any(dim=0).logical_not().double().mean())

    ref = {"act_min": float(x.min()), "act_max": float(x.max()), "act_mean": float(x.mean()), "act_std": float(x.std()),
           "act_zero_frac": float((x == 0).double().mean())}
    if isinstance(module, nn.ReLU):
        ref["dead_frac"] = dead(x)
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        ref["in_dead_frac"] = dead(inp.detach())
    if isinstance(module, (nn.Tanh, nn.Sigmoid)):
        ref["sat_frac"] = float((inp.detach().abs() > 5).double().mean())
    return ref


@pytest.mark.parametrize("moments", [False, True], ids=["cpu-reductions", "accelerator-reductions"])
def test_activation_and_gradient_statistics_match_their_definitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    moments: bool) -> None:
    """Every stored statistic of every module equals its definition computed directly (the runtime's
    cheaper reductions, the reuse of a ReLU's dead units for the next layer, the host-side decoding),
    with the reductions used on CPU and with those used on accelerators (forced here on CPU), also
    for outputs whose spread is tiny beside their mean (a saturated sigmoid, a shifted layer)."""
    from gradsight.runtime import activations

    if moments:
        monkeypatch.setattr(activations, "row_flags", lambda flags, device: flags | activations._MOMENTS)
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)
            self.crelu = nn.ReLU()
            self.fc1 = nn.Linear(4 * 6 * 6, 32)
            self.relu = nn.ReLU()
            self.fc2 = nn.Linear(32, 16)
            self.tanh = nn.Tanh()
            self.out = nn.Linear(16, 1)
            self.shifted = nn.Linear(4 * 6 * 6, 64)
            self.sigmoid = nn.Sigmoid()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.crelu(self.conv(x)).flatten(1)
            gate = self.sigmoid(self.shifted(h)).mean(dim=1, keepdim=True)
            return self.out(self.tanh(self.fc2(self.relu(self.fc1(h))))) * gate

    model = Net()
    with torch.no_grad():
        model.fc1.bias[:10] = -50.0  # dead ReLU units, and dead inputs of fc2
        model.fc2.weight.mul_(200.0)  # a saturated tanh
        model.conv.bias[:1] = -50.0  # a dead channel
        model.shifted.weight.mul_(1e-3)
        model.shifted.bias.fill_(9.0)  # outputs 9 +- ~1e-3, and a sigmoid at 0.99988 +- ~1e-7
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    refs: list[dict[str, dict[str, float]]] = []
    grads: list[dict[str, torch.Tensor]] = []
    names = {m: n for n, m in model.named_modules() if n}
    with gradsight.watch(model, opt, store=tmp_path / "run.db", every=1, triggers="none") as handle:
        for _ in range(3):
            step_refs: dict[str, dict[str, float]] = {}
            hooks = [m.register_forward_hook(lambda m, a, o, refs=step_refs: refs.__setitem__(names[m], _reference_stats(m, a[0], o)))
                     for m in names]
            x = torch.randn(8, 2, 6, 6)
            opt.zero_grad()
            (model(x) - 1.0).pow(2).mean().backward()
            for h in hooks:
                h.remove()
            refs.append(step_refs)
            grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
            opt.step()
    with RunStore(handle.store) as run:
        ids = {m.name: m.id for m in run.modules()}
        checked = 0
        for kind in ("act_min", "act_max", "act_mean", "act_std", "act_zero_frac", "dead_frac", "in_dead_frac", "sat_frac"):
            steps, values = run.metric(kind)
            assert list(steps) == [0, 1, 2]
            for s in range(3):
                for name, ref in refs[s].items():
                    got = values[s, ids[name]]
                    if kind == "act_std":  # relative: a tiny spread must not pass as zero
                        assert got == pytest.approx(ref[kind], rel=1e-3, abs=0), (kind, s, name)
                        checked += 1
                    elif kind in ref:
                        assert got == pytest.approx(ref[kind], rel=1e-4, abs=1e-5), (kind, s, name)
                        checked += 1
                    else:
                        assert np.isnan(got), (kind, s, name)
        assert checked > 3 * 9 * 5
        assert run.metric("dead_frac")[1][0, ids["relu"]] >= 10 / 32 and run.metric("sat_frac")[1][0, ids["tanh"]] > 0.1
        for kind, fn in (("grad_zero_frac", lambda g: float((g == 0).double().mean())),
                         ("grad_mean", lambda g: float(g.double().abs().mean())),
                         ("grad_max", lambda g: float(g.double().abs().max()))):
            _, values = run.metric(kind)
            for s in range(3):
                for layer in ("conv", "fc1", "out"):
                    g = torch.cat([grads[s][f"{layer}.weight"].reshape(-1), grads[s][f"{layer}.bias"].reshape(-1)])
                    assert values[s, ids[layer]] == pytest.approx(fn(g), rel=1e-4, abs=1e-9), (kind, s, layer)


def test_gradsight_says_when_its_own_work_slows_training(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Full detail on a 36-module net costs more than the step itself: one warning (stderr and an
    `overhead` event) with the measured share; the defaults on the same net stay quiet."""
    monkeypatch.setattr(owntime, "OVERHEAD_WINDOW", 50)  # windows of 50 steps instead of 200: a shorter test
    # a share of 5% (not 25%): on a machine loaded by other work the plain part of each step grows too, and full
    # detail's share shrinks towards it; the 2 ms a step floor still keeps the defaults quiet
    monkeypatch.setattr(owntime, "OVERHEAD_SHARE", 0.05)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(12):
        layers += [nn.Linear(64, 64), nn.Tanh(), nn.LayerNorm(64)]
    model = nn.Sequential(*layers, nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train(steps: int) -> None:
        for _ in range(steps):
            x = torch.randn(32, 64)
            opt.zero_grad()
            (model(x) - x[:, :1]).pow(2).mean().backward()
            opt.step()

    with gradsight.watch(model, opt, store=tmp_path / "full.db", every=1, triggers="none") as handle:
        train(170)
    err = capfd.readouterr().err
    # once, not at every window (the first window after the one holding the session's start, unless a loaded
    # machine slowed the plain work of that one more than gradsight's)
    assert len(re.findall(r"gradsight: its own work made steps (50-99|100-149) ", err)) == 1 and err.count("own work made") == 1, err
    assert "activation statistics every 1 step" in err
    with RunStore(handle.store) as run:
        warned = [e for e in run.events("warning") if e.name == "overhead"]
        assert len(warned) == 1 and warned[0].value is not None and warned[0].value > 0.05
        assert warned[0].step in (99, 149)
    full_share = handle.own_share
    assert full_share is not None and full_share > 0.05
    with gradsight.watch(model, opt, store=tmp_path / "defaults.db", triggers="none") as handle:
        train(120)
    assert "own work made" not in capfd.readouterr().err
    assert handle.own_share is not None and handle.own_share < full_share / 2
    with RunStore(handle.store) as run:
        assert not [e for e in run.events("warning") if e.name == "overhead"]


def test_a_tied_output_layer_keeps_quiet_steps_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A language model whose output layer shares the embedding's weight (that layer holds no
    parameter of its own, so its norm is NaN): healthy steps still pass the one-look quiet check
    instead of running every trigger in full at every step."""
    from gradsight.runtime import triggers

    seen: list[bool] = []
    real = triggers.QuickCheck.quiet

    def spy(self: triggers.QuickCheck, h: triggers.History) -> bool:
        seen.append(real(self, h))
        return seen[-1]

    monkeypatch.setattr(triggers.QuickCheck, "quiet", spy)

    class TiedLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(100, 32)
            self.body = nn.Linear(32, 32)
            self.head = nn.Linear(32, 100, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.tanh(self.body(self.emb(x))))

    torch.manual_seed(0)
    model = TiedLM()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradsight.watch(model, opt, store=tmp_path / "run.db") as handle:
        for _ in range(50):
            x = torch.randint(0, 100, (16, 8))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x).reshape(-1, 100), x.reshape(-1)).backward()
            opt.step()
    assert handle.anomalies == []
    assert len(seen) == 50 and sum(seen) >= 45  # all but the sampled steps


class _Saves(nn.Module):
    """tanh, remembering a weak reference to each output: a graph keeps it alive (tanh saves its result for backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[Any] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(x)
        self.made.append(weakref.ref(y))
        return y


def _saving_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), _Saves(), nn.Linear(16, 1))


def _alive(refs: list[Any]) -> int:
    gc.collect()
    return sum(r() is not None for r in refs)


def _evaluate(model: nn.Sequential, batches: int) -> tuple[list[Any], list[float]]:
    """Forward passes with gradients on and no backward (an evaluation loop without no_grad), each output dropped
    once read: what of their graphs is still alive, and the outputs' sums."""
    saves = model[1]
    assert isinstance(saves, _Saves)
    saves.made.clear()
    outs = [float(model(torch.full((4, 8), float(i))).sum()) for i in range(batches)]
    return list(saves.made), outs


def test_graphs_of_forwards_without_backward_are_not_kept_alive(tmp_path: Path) -> None:
    """Where a NaN started is read off module outputs' graph nodes, held until a backward consumes them, at most a
    few forward passes' worth: an evaluation loop with gradients on keeps no more alive, and a backward lets go."""
    plain_model = _saving_mlp()
    _train(plain_model, torch.optim.SGD(plain_model.parameters(), lr=0.01), 3)
    plain_refs, plain_out = _evaluate(plain_model, 30)
    assert _alive(plain_refs) == 0
    model = _saving_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradsight.watch(model, opt, store=tmp_path / "run.db"):
        _train(model, opt, 3)
        refs, out = _evaluate(model, 30)
        assert out == plain_out
        assert 0 < _alive(refs) <= nanorigin.MAX_CALLS  # (held: the last few, never the whole loop)
        _train(model, opt, 1)
        assert _alive(refs) == 0  # a backward: nothing of the evaluation is held any more


@pytest.mark.parametrize("layer", ["linear", "conv"])
def test_a_non_finite_weight_is_traced_to_its_layer_not_the_one_before(tmp_path: Path, layer: str) -> None:
    """A NaN written into a middle layer's weight (a module-level nn.Sequential): its output is the first non-finite
    one, not that of the clean ReLU whose output it also takes in."""
    from gradsight.analysis.diagnose import diagnose

    torch.manual_seed(0)
    if layer == "linear":
        model: nn.Sequential = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    else:
        model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.Tanh(), nn.Flatten(),
                              nn.Linear(4 * 6 * 6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradsight.watch(model, opt, store=tmp_path / "run.db") as handle:
        for step in range(8):
            x = torch.randn(8, 8) if layer == "linear" else torch.randn(8, 1, 6, 6)
            if step == 5:
                with torch.no_grad():
                    model[2].weight.view(-1)[0] = float("nan")
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert (5, "nan_inf") in handle.anomalies
    cause = diagnose(handle.store).root_cause
    assert cause is not None and (cause.module, cause.kind) == ("2", "nan_inf")
