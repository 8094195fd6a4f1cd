"""Layers kept in a plain Python list run in the forward and get gradients, but the model does not hold them: they
are not in ``model.parameters()`` and the optimizer never steps them. Traced for real: the list is named, with the
container to use; an ``nn.ModuleList``, a frozen teacher kept in a list on purpose, and a list whose parameters the
optimizer is given by hand are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_gradsight

SCRIPT = '''
import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.blocks = BLOCKS
        self.teacher = [nn.Linear(8, 1).requires_grad_(False)]  # kept out of the model on purpose: frozen, never saved
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        for b in self.blocks:
            h = h + torch.tanh(b(h))
        return self.out(h) + 0.0 * self.teacher[0](x)


model = Net()
opt = torch.optim.Adam(PARAMS, lr=3e-3)
X = torch.randn(256, 8)
Y = torch.sin(X[:, :1] * 2) + X[:, 1:2] * X[:, 2:3]
for step in range(60):
    loss = nn.functional.mse_loss(model(X), Y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")
'''

LIST = "[nn.Linear(32, 32) for _ in range(3)]"


def _diagnose(tmp_path: Path, blocks: str, params: str) -> tuple[dict, str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("BLOCKS", blocks).replace("PARAMS", params))
    store = tmp_path / "run.db"
    traced = run_gradsight("trace", str(script), "--output", str(store), "--quiet", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr
    out = run_gradsight("diagnose", str(store), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), traced.stdout


def test_blocks_in_a_plain_list_are_named_as_never_trained(tmp_path: Path) -> None:
    d, out = _diagnose(tmp_path, LIST, "model.parameters()")
    assert out.startswith("final loss")  # the script's own output, unchanged
    assert d["root_cause"]["kind"] == "not_updated", d["root_cause"]
    assert d["evidence"].startswith("blocks is a plain Python list holding 3 modules (3,168 parameters)")
    assert "nn.ModuleList" in d["evidence"]
    assert "teacher" not in json.dumps(d)  # frozen: no gradient, nothing to report
    # the first fix registers the list where the class assigns it, and a real re-run validates it
    fix = d["fixes"][0]
    assert fix["id"] == "register-layer-container", [f["id"] for f in d["fixes"]]
    assert "self.blocks = nn.ModuleList([nn.Linear(32, 32) for _ in range(3)])" in fix["snippet"], fix
    assert "teacher" not in fix["snippet"]
    done = run_gradsight("validate", str(tmp_path / "run.db"), "--fix", fix["id"], "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)["fixes"][0]
    assert got["verdict"] == "validated" and got["loss"] < got["loss_before"], got


@pytest.mark.parametrize("blocks, params", [
    (f"nn.ModuleList({LIST})", "model.parameters()"),
    (LIST, "list(model.parameters()) + [p for b in model.blocks for p in b.parameters()]"),
])
def test_registered_or_optimized_blocks_are_not_named(tmp_path: Path, blocks: str, params: str) -> None:
    d, _ = _diagnose(tmp_path, blocks, params)
    issues = [i["kind"] for x in d["layers"] for i in x["issues"]] + [f["kind"] for f in d["findings"]]
    assert "not_updated" not in issues, d["layers"]
    assert "plain Python" not in json.dumps(d)
