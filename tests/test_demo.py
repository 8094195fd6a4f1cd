"""`gradsight demo`: the built-in transformer's real fault explodes at a known step and is caught."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from gradsight.store import RunStore

from .conftest import run_gradsight


def test_demo_catches_the_explosion(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run_gradsight("demo", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "anomaly: step 79 (loss_spike)" in proc.stdout
    assert "root cause: embed - activation_out_of_range (confidence " in proc.stdout
    assert "first fix: Make weight decay non-negative" in proc.stdout
    # the whole story on disk: pictures and reports drawn from the store
    assert (out / "heatmap.png").read_bytes().startswith(b"\x89PNG")
    page = (out / "report.html").read_text()
    for title in ("Gradient norm per layer over steps", "Gradient flow at step 79", "Activations of embed at step 80",
                  "Attention map blocks.0.attn.softmax at step 80", "Embeddings of embed (PCA) at step 79"):
        assert title in page, title
    pdf = (out / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", pdf)) >= 6
    with RunStore(out / "snapshot.db") as run:
        events = run.events("trigger")
        assert [(e.step, e.name) for e in events] == [(79, "loss_spike"), (83, "grad_explode")]
        assert events[1].module == "head"
        names = [m.name for m in run.modules()]
        # the fault: the embedding's output keeps growing out of range while the loss is still fine
        steps, act_max = run.metric("act_max")
        embed = act_max[:, names.index("embed")]
        assert np.all(np.diff(embed[steps <= 80]) > 0) and embed[steps == 80][0] > 20 * embed[0]
        losses = run.steps()["loss"]
        assert losses[:60].min() < losses[0] / 2  # it learned before it broke
        assert {t.role for t in run.tensors(step=79)} >= {"gradient", "weight", "input"}
        assert "activation" in {t.role for t in run.tensors(step=80)}  # from the next forward: the user's is never re-run
