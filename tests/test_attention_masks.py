"""An inverted padding mask, traced for real: attention pooling over sets of items padded with zero rows, through
nn.MultiheadAttention's key_padding_mask. Inverted (True on the real items), every query sees only the padding,
which is one repeated item, and the loss stays at chance: the attention module is named. The same sets with the
mask the right way round (most of each set is padding) train and are not. The fix inverts the mask and validates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_gradsight, trace_and_diagnose

SETS = '''
import torch
from torch import nn

torch.manual_seed(0)
N, K, D = 512, 12, 8
lengths = torch.randint(2, 6, (N,))
x = torch.randn(N, K, D)
x[torch.arange(K)[None] >= lengths[:, None]] = 0.0  # padding items: zero rows, most of each set
y = (x[..., 0].sum(1) > 0).long()


class Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(D, 32)
        self.seed = nn.Parameter(0.1 * torch.randn(1, 1, 32))
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, items):
        h = self.embed(items)
        padding = items.abs().sum(-1) == 0
        out, _ = self.attn(self.seed.expand(items.shape[0], -1, -1), h, h, key_padding_mask=MASK)
        return self.head(out[:, 0])


model = Pool()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(150):
    i = torch.randint(0, N, (32,))
    loss = nn.functional.cross_entropy(model(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
'''


@pytest.mark.parametrize("mask, inverted", [("~padding", True), ("padding", False)])
def test_an_inverted_padding_mask_is_named_at_the_attention(tmp_path: Path, mask: str, inverted: bool) -> None:
    report, printed, _ = trace_and_diagnose(tmp_path, SETS.replace("MASK", mask))
    final = float(printed.split("final loss")[-1])
    cause = report["root_cause"]
    if inverted:
        assert final > 0.6  # (chance is 0.69: nothing reaches the head)
        assert cause is not None and (cause["module"], cause["kind"]) == ("attn", "attention_collapse"), cause
        assert "the padding mask is inverted" in report["evidence"]
        # the first fix inverts the mask where the script gives it, and a real re-run validates it
        fix = report["fixes"][0]
        assert fix["id"] == "invert-attention-mask", [f["id"] for f in report["fixes"]]
        assert "torch.logical_not(~padding)" in fix["snippet"], fix
        done = run_gradsight("validate", str(tmp_path / "run.db"), "--fix", fix["id"], "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)["fixes"][0]
        assert got["verdict"] == "validated" and got["loss"] < got["loss_before"], got
    else:
        assert final < 0.3
        assert cause is None, cause
