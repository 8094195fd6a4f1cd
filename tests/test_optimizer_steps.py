"""A step is one optimizer step, as the optimizer counts it: closures, accumulation, clipping, GradScaler."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from gradsight.store import RunStore

from .conftest import run_gradsight


def _trace(tmp_path: Path, body: str, *args: str) -> tuple[RunStore, list[str], str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    store = tmp_path / "run.db"
    proc = run_gradsight("trace", str(script), "--output", str(store), *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return RunStore(store), proc.stdout.splitlines(), proc.stderr


def test_lbfgs_records_each_closure_step_with_its_loss_and_gradients(tmp_path: Path) -> None:
    run, out, _ = _trace(tmp_path, """\
        import json
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
        X = torch.randn(64, 4); Y = (X ** 2).sum(1, keepdim=True)
        first = []
        for it in range(8):
            calls = []
            def closure():
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(X), Y)
                loss.backward()
                if not calls:
                    first.append((loss.item(), torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm().item()))
                calls.append(1)
                return loss
            opt.step(closure)
        print(json.dumps(first))
        """)
    first = json.loads(out[-1])
    with run:
        steps = run.steps()
        assert steps["step"].tolist() == list(range(8))  # one step per optimizer step, not one per closure call
        assert np.allclose(steps["loss"], [f[0] for f in first], rtol=1e-6)  # the loss the first closure call returned
        assert np.allclose(steps["grad_norm"], [f[1] for f in first], rtol=1e-4)  # its gradients, before the update
        assert (steps["n_backward"] >= 1).all()


def test_a_nan_in_an_lbfgs_run_is_caught(tmp_path: Path) -> None:
    run, _, err = _trace(tmp_path, """\
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
        X = torch.randn(64, 4); Y = (X ** 2).sum(1, keepdim=True)
        for it in range(10):
            def closure():
                opt.zero_grad()
                out = model(X)
                if it >= 6:
                    out = out / (X[:, :1] * 0)  # a division by zero from step 6 on
                loss = nn.functional.mse_loss(out, Y)
                loss.backward()
                return loss
            opt.step(closure)
        """)
    assert "anomaly at step 6: nan_inf" in err
    with run:
        fired = [(e.step, e.name) for e in run.events("trigger")]
        assert min(s for s, _ in fired) == 6 and (6, "nan_inf") in fired


def test_accumulation_records_the_optimizer_steps_and_the_mean_loss(tmp_path: Path) -> None:
    run, out, _ = _trace(tmp_path, """\
        import json
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        accum, means, micro = 4, [], []
        for it in range(40):
            x = torch.randn(16, 8)
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            micro.append(loss.item())
            (loss / accum).backward()
            if (it + 1) % accum == 0:
                opt.step(); opt.zero_grad()
                means.append(sum(micro) / len(micro)); micro = []
        print(json.dumps(means))
        """, "--every", "3")
    means = json.loads(out[-1])
    with run:
        steps = run.steps()
        assert steps["step"].tolist() == list(range(10))  # 10 optimizer steps, no step for a micro-batch
        assert steps["n_backward"].tolist() == [4] * 10
        assert np.allclose(steps["loss"], means, rtol=1e-6)  # the micro-batches' mean, not divided by 4


def test_gradients_are_read_before_clipping(tmp_path: Path) -> None:
    run, _, err = _trace(tmp_path, """\
        import torch
        from torch import nn
        from torch.nn.utils import clip_grad_norm_
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for step in range(30):
            x = torch.randn(16, 8)
            y = x.sum(1, keepdim=True) * (1e4 if step == 20 else 1.0)  # targets far off at step 20: a huge gradient
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad(); loss.backward()
            clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        """)
    assert "anomaly at step 20: grad_explode" in err  # fired on the gradients as the backward made them
    with run:
        steps = run.steps()
        assert steps["grad_norm"][20] > 1e3
        assert np.all(steps["grad_norm_clipped"] <= 1.0 + 1e-5) and np.all(steps["clip_norm"] == 1.0)
        _, per_module = run.metric("grad_norm")
        assert np.nanmax(per_module[20]) > 50


CLIPPED = """\
    import json
    import torch
    from torch import nn
    calls = [0]
    original = torch._foreach_norm
    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)
    torch._foreach_norm = counted
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    pre, totals, per_step = [], [], []
    for step in range(40):
        x = torch.randn(16, 8)
        loss = (model(x) - 3 * x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad(); loss.backward()
        pre.append([float(torch.linalg.vector_norm(p.grad)) for p in model.parameters()])
        before = calls[0]
        totals.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
        opt.step()
        per_step.append(calls[0] - before)
    print(json.dumps({"totals": totals, "weights": [p.detach().flatten().tolist() for p in model.parameters()], "pre": pre,
                      "calls": per_step}))
    """


def test_an_ordinary_clipped_step_takes_the_norms_clipping_computes(tmp_path: Path) -> None:
    """clip_grad_norm_ takes every gradient's L2 norm before it scales them: an ordinary step records those
    (one pass over the gradients, not two), and the script computes and clips exactly as without gradsight."""
    plain_script = tmp_path / "plain.py"
    plain_script.write_text(textwrap.dedent(CLIPPED))
    plain = json.loads(subprocess.run([sys.executable, str(plain_script)], capture_output=True, text=True, check=True,
                                      cwd=tmp_path).stdout.splitlines()[-1])
    run, out, _ = _trace(tmp_path, CLIPPED, "--every", "10")
    traced = json.loads(out[-1])
    assert traced["totals"] == plain["totals"] and traced["weights"] == plain["weights"]  # bit for bit
    with run:
        steps = run.steps()
        sampled = steps["sampled"].astype(bool)
        # (the step after a sampled one also reads the weights' update: not an ordinary step)
        ordinary = [s for s in range(1, 40) if not sampled[s] and not sampled[s - 1]]
        assert len(ordinary) > 25
        assert [traced["calls"][s] for s in ordinary] == [1] * len(ordinary)  # the clip's own norms, not taken again
        _, norms = run.metric("param_grad_norm")
        assert np.allclose(norms[ordinary], np.asarray(traced["pre"])[ordinary], rtol=1e-6)  # as before clipping
        assert np.all(steps["grad_norm"][ordinary] > 0.5)  # (so clipping did scale them)
        assert np.allclose(steps["grad_norm_clipped"][ordinary], 0.5, rtol=1e-4)


def test_grad_scaler_records_unscaled_losses_and_skipped_steps(tmp_path: Path) -> None:
    run, out, _ = _trace(tmp_path, """\
        import json
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
        losses = []
        for step in range(12):
            x = torch.randn(16, 8)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = (out.float() - x.sum(1, keepdim=True)).pow(2).mean()
            losses.append(loss.item())
            hook = model[0].weight.register_hook(lambda g: g * float("inf")) if step == 5 else None
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if hook is not None:
                hook.remove()
        print(json.dumps(losses))
        """)
    losses = json.loads(out[-1])
    with run:
        steps = run.steps()
        assert steps["step"].tolist() == list(range(12))  # the skipped step is a step of its own, not merged
        assert np.allclose(steps["loss"], losses, rtol=1e-5)  # unscaled (not x65536)
        assert steps["skipped"].tolist() == [0] * 5 + [1] + [0] * 6
        assert [(e.step, e.kind) for e in run.events("skipped")] == [(5, "skipped")]
        assert not run.events("trigger")  # a skip the scaler handled is not a NaN anomaly


def test_an_optimizer_that_never_steps_is_the_diagnosis(tmp_path: Path) -> None:
    """Accumulation over more micro-batches than an epoch holds: backward() runs, step() is never reached. No step
    is recorded, and that is the finding: the optimizer never updated anything (not "nothing to diagnose")."""
    run, _, _ = _trace(tmp_path, """\
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        X = torch.randn(64, 4); Y = X.sum(1, keepdim=True)
        ACCUM = 16
        for epoch in range(5):
            for i in range(8):
                loss = nn.functional.mse_loss(model(X[i * 8:(i + 1) * 8]), Y[i * 8:(i + 1) * 8]) / ACCUM
                loss.backward()
                if (i + 1) % ACCUM == 0:
                    opt.step()
                    opt.zero_grad()
        """)
    with run:
        assert not len(run.steps()["step"])
    proc = run_gradsight("diagnose", str(tmp_path / "run.db"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert (d["root_cause"]["module"], d["root_cause"]["kind"]) == ("optimizer", "not_updated")
    assert "backward() ran 40 times" in d["evidence"] and "never stepped" in d["evidence"]
    assert not d["fixes"] or all(f["id"] != "register-missing-params" for f in d["fixes"])


def test_a_model_whose_parts_the_loop_calls_is_watched_whole(tmp_path: Path) -> None:
    """A matrix factorisation whose embeddings a function of the script calls (the model's own forward never
    runs): the model is the module holding the optimizer's parameters, every embedding recorded as one of its layers."""
    run, _, _ = _trace(tmp_path, """\
        import torch
        from torch import nn
        torch.manual_seed(0)
        class MF(nn.Module):
            def __init__(self):
                super().__init__()
                self.user_emb = nn.Embedding(50, 8)
                self.item_emb = nn.Embedding(40, 8)
                self.item_bias = nn.Embedding(40, 1)
        def score(m, u, i):
            return (m.user_emb(u) * m.item_emb(i)).sum(-1) + m.item_bias(i).squeeze(-1)
        model = MF()
        opt = torch.optim.Adagrad(model.parameters(), lr=0.1)
        for step in range(12):
            u, p, n = torch.randint(0, 50, (32,)), torch.randint(0, 40, (32,)), torch.randint(0, 40, (32,))
            loss = -nn.functional.logsigmoid(score(model, u, p) - score(model, u, n)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        """)
    with run:
        assert run.run()["model"] == "MF"
        names = {m.name for m in run.modules()}
        assert {"user_emb", "item_emb", "item_bias"} <= names
        assert len(run.steps()["step"]) == 12
