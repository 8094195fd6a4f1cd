"""A functional model (its layers' parameters in a ModuleDict, its forward F.linear calls): no layer module is ever
called, so an F.dropout or torch.sigmoid output feeds no module call. The runtime reads off the loss's graph which
op took the output and names the layer whose parameters that op also takes (traced for real)."""

from __future__ import annotations

from pathlib import Path

from gradsight.store import RunStore

from .conftest import trace_and_diagnose

SCRIPT = """
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
x = torch.randn(512, 16)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4:8].sum(1) > 0).long()


def layer(n_in, n_out):
    w = torch.empty(n_out, n_in)
    nn.init.kaiming_uniform_(w, a=5 ** 0.5)
    return nn.ParameterDict({"weight": nn.Parameter(w), "bias": nn.Parameter(torch.zeros(n_out))})


params = nn.ModuleDict({"layer0": layer(16, 64), "layer1": layer(64, 64), "gate": layer(64, 64), "head": layer(64, 3)})


def forward(p, x, training=True):
    h = torch.tanh(F.linear(x, p["layer0"]["weight"], p["layer0"]["bias"]))
    h = h * torch.sigmoid(F.linear(h, p["gate"]["weight"], p["gate"]["bias"]))  # a gate: feeds no layer
    h = F.dropout(h, p=DROP, training=training)
    h = torch.tanh(F.linear(h, p["layer1"]["weight"], p["layer1"]["bias"]))
    return F.linear(h, p["head"]["weight"], p["head"]["bias"])


opt = torch.optim.SGD(params.parameters(), lr=0.05)
for step in range(120):
    i = torch.randint(0, 512, (64,))
    loss = F.cross_entropy(forward(params, x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
"""


def _trace(tmp_path: Path, drop: str) -> tuple[dict, RunStore]:
    report, _, store = trace_and_diagnose(tmp_path, SCRIPT.replace("DROP", drop), "functional.py")
    return report, RunStore(store)


def test_a_functional_dropout_is_named_by_the_layer_it_feeds_and_a_gate_feeds_none(tmp_path: Path) -> None:
    d, store = _trace(tmp_path, "0.9")
    with store as run:
        dropout = [o.data for o in run.observations("dropout")]
        sigmoid = [o.data for o in run.observations("sigmoid")]
    assert dropout and all(o.get("feeds") == "layer1" for o in dropout), dropout
    assert sigmoid and not any("feeds" in o for o in sigmoid), sigmoid  # the gate's output goes to a product, not a layer
    assert d["root_cause"] is not None, d["checked"]
    assert (d["root_cause"]["module"], d["root_cause"]["kind"]) == ("layer1", "dropout_too_high"), d["evidence"]


def test_an_ordinary_functional_dropout_is_not_reported(tmp_path: Path) -> None:
    d, _ = _trace(tmp_path, "0.1")
    assert not any(f["kind"] == "dropout_too_high" for f in d["findings"]), d["findings"]


def test_a_functional_model_is_measured_on_sampled_steps_only(tmp_path: Path) -> None:
    """Its forward calls none of its modules, so no forward order is ever seen; the modules keep their places after
    two measured steps, and the run is measured every 100 steps like any other, not on every step (10x slower)."""
    _, store = _trace(tmp_path, "0.1")
    with store as run:
        steps = run.steps()
        orders = [m.forward_order for m in run.modules()]
    assert len(steps["step"]) == 120
    assert int(steps["sampled"].sum()) <= 5, steps["sampled"]
    assert all(o is not None for o in orders)
