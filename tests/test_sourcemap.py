"""Modules map to the source line that creates them: own classes and installed libraries."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch import nn

from gradsight.runtime.sourcemap import map_modules
from gradsight.store import RunStore

from .conftest import SCRIPTS, run_gradsight


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.query = nn.Linear(d, d)
        for i in range(2):
            self.add_module(f"extra{i}", nn.Linear(d, d))
        self.register_module("gate", nn.Sigmoid())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(4) for _ in range(3)])
        self.head = nn.Sequential(
            nn.Linear(4, 4),
            nn.Tanh(),
        )
        self.built = nn.Sequential(*[nn.Linear(4, 4) for _ in range(2)])


def _line(loc_line: int) -> str:
    return Path(__file__).read_text().splitlines()[loc_line - 1].strip()


def test_own_classes() -> None:
    locs = map_modules(Net())
    assert _line(locs[""].line).startswith("class Net")
    assert _line(locs["blocks"].line).startswith("self.blocks = nn.ModuleList")
    # every instance of a layer shares the line in its class
    for i in range(3):
        loc = locs[f"blocks.{i}.query"]
        assert _line(loc.line) == "self.query = nn.Linear(d, d)"
        assert loc.owner == f"{__name__}.Block" and loc.attr == "query"
        assert _line(locs[f"blocks.{i}"].line).startswith("self.blocks = nn.ModuleList")
    assert _line(locs["blocks.0.extra1"].line).startswith('self.add_module(f"extra{i}"')
    assert _line(locs["blocks.2.gate"].line).startswith('self.register_module("gate"')
    # a literal Sequential points at each argument's line; a built one at the Sequential
    assert _line(locs["head.0"].line) == "nn.Linear(4, 4),"
    assert _line(locs["head.1"].line) == "nn.Tanh(),"
    assert _line(locs["built.1"].line).startswith("self.built = nn.Sequential")


def test_transformers_bert_traced(tmp_path: Path) -> None:
    store = tmp_path / "bert.db"
    proc = run_gradsight("trace", str(SCRIPTS / "bert_train.py"), "4", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    import transformers.models.bert.modeling_bert as mb

    bert_file = inspect.getsourcefile(mb)
    lines = Path(bert_file).read_text().splitlines()  # type: ignore[arg-type]
    with RunStore(store) as run:
        assert run.run()["model"] == "BertForSequenceClassification"
        mods = {m.name: m for m in run.modules()}
        expect = {
            "bert.encoder.layer.0.attention.self.query": "self.query = nn.Linear(",
            "bert.encoder.layer.1.attention.self.query": "self.query = nn.Linear(",
            "bert.embeddings.word_embeddings": "self.word_embeddings = nn.Embedding(",
            "bert.encoder.layer.1.output.dense": "self.dense = nn.Linear(",
        }
        for name, text in expect.items():
            m = mods[name]
            assert m.file == bert_file
            assert lines[m.line - 1].strip().startswith(text), (name, lines[m.line - 1])  # type: ignore[operator]
        assert mods["bert.encoder.layer.0.attention.self.query"].owner == "transformers.models.bert.modeling_bert.BertSelfAttention"
        assert mods["classifier"].type == "Linear"
        assert run.last_step() == 3
        _, norms = run.metric("grad_norm")
        q = mods["bert.encoder.layer.0.attention.self.query"].id
        assert (norms[:, q] > 0).all()
        # the pooler gets gradients through the classifier; nothing is frozen
        assert all(p["trainable"] for p in run.params())
    assert torch.__version__.startswith("2.13")
