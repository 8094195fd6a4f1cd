"""What a loss is given, traced for real: CTC scores log-probabilities (log_softmax over the classes); given the
raw logits, its "likelihood" is none (values above 0 sum into it), which is named as the loss's input; the same
model with log_softmax is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_gradsight

CTC = '''
import torch
from torch import nn

torch.manual_seed(0)
T, B, C, S = 30, 16, 6, 8
model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, C))
ctc = nn.CTCLoss(blank=0)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
targets = torch.randint(1, C, (B, S))
feats = torch.randn(T, B, 10)
for s in range(S):  # each target symbol shows as a pattern in a stretch of frames
    feats[3 * s: 3 * s + 3, torch.arange(B), targets[:, s]] += 3.0
for step in range(120):
    out = model(feats)
    loss = ctc(OUTPUT, targets, torch.full((B,), T), torch.full((B,), S))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
'''


def _diagnose(tmp_path: Path, source: str) -> dict:
    script = tmp_path / "train.py"
    script.write_text(source)
    store = tmp_path / "run.db"
    traced = run_gradsight("trace", str(script), "--output", str(store), "--quiet", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr
    out = run_gradsight("diagnose", str(store), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("output, named", [("out", True), ("out.log_softmax(-1)", False)])
def test_ctc_given_raw_logits_is_named_as_the_losss_input(tmp_path: Path, output: str, named: bool) -> None:
    d = _diagnose(tmp_path, CTC.replace("OUTPUT", output))
    mismatch = [f for f in d["findings"] if f["kind"] == "loss_target_mismatch" and f["module"] == "loss"]
    assert bool(mismatch) is named, d["findings"]
    if named:
        assert d["root_cause"]["module"] == "loss" and d["root_cause"]["kind"] == "loss_target_mismatch"
        assert "log-probabilities" in mismatch[0]["evidence"]
