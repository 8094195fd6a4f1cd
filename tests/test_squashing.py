"""Sigmoids as hidden activations, traced for real: a chain of torch.sigmoid calls between layers (the runtime
follows each call's output to the layer it feeds) is named when the loss makes poor progress; a sigmoid used as
a gate, whose output feeds no layer, is not."""

from __future__ import annotations

import json
from pathlib import Path

from gradsight.analysis.squashing import SLOW
from gradsight.store import RunStore

from .conftest import run_gradsight

SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 16)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4:8].sum(1) > 0).long()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.gate = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 3)

    def forward(self, x):
        h = ACT(self.fc1(x))
        h = ACT(self.fc2(h))
        h = h * torch.sigmoid(self.gate(h))  # a gate: its sigmoid feeds no layer
        return self.fc3(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=LR)
for step in range(150):
    i = torch.randint(0, 512, (64,))
    loss = nn.functional.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
"""


def _diagnose(tmp_path: Path, act: str, lr: str) -> dict:
    script = tmp_path / "net.py"
    script.write_text(SCRIPT.replace("ACT", act).replace("LR", lr))
    store = tmp_path / "run.db"
    traced = run_gradsight("trace", str(script), "--output", str(store), "--quiet", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr[-2000:]
    out = run_gradsight("diagnose", str(store), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_a_chain_of_hidden_sigmoids_is_named_at_the_first_layer(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, "torch.sigmoid", "0.05")
    assert d["root_cause"] is not None, d["checked"]
    assert (d["root_cause"]["module"], d["root_cause"]["kind"]) == ("fc1", "saturation"), d["evidence"]
    assert "2 hidden layers end in a sigmoid" in d["evidence"]


def test_a_sigmoid_gate_beside_relus_is_not_a_hidden_sigmoid(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, "torch.relu", "0.002")  # a slow run too: only the sigmoids' place tells them apart
    with RunStore(tmp_path / "run.db") as run:
        loss = run.steps()["loss"]
    assert loss[-10:].mean() > SLOW * loss[:10].mean()
    assert not any(f["kind"] == "saturation" for f in d["findings"])
    assert not any(i["kind"] == "saturation" for layer in d["layers"] for i in layer["issues"])
    assert d["root_cause"] is None or d["root_cause"]["kind"] != "saturation"
