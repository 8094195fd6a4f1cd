"""Modules map to the source line that creates them: own classes and installed libraries, module-level containers,
add_module, factories, loops and comprehensions, wrapped models; with creation notes (gradsight trace) and without
(a model handed to watch() after it was built)."""

from __future__ import annotations

import copy
import gc
import inspect
import io
import pickle
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

from gradsight.runtime import creation
from gradsight.runtime.sourcemap import map_modules
from gradsight.store import RunStore

from .conftest import ROOT, SCRIPTS, run_gradsight


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
        # the model itself: the line of the user's script that built it (the library built its layers)
        script = (SCRIPTS / "bert_train.py").read_text().splitlines()
        assert mods[""].file == str(SCRIPTS / "bert_train.py") and mods[""].label == "model"
        assert script[mods[""].line - 1].strip() == "model = BertForSequenceClassification(config)"
        assert mods["classifier"].type == "Linear"
        assert run.last_step() == 3
        _, norms = run.metric("grad_norm")
        q = mods["bert.encoder.layer.0.attention.self.query"].id
        assert (norms[:, q] > 0).all()
        # the pooler gets gradients through the classifier; nothing is frozen
        assert all(p["trainable"] for p in run.params())
    assert torch.__version__.startswith("2.13")


def _noted(build):  # noqa: ANN001 - a zero-argument builder
    """What ``build()`` returns, built with creation notes on (as under gradsight trace)."""
    creation.install()
    try:
        return build()
    finally:
        creation.uninstall()


def _mlp(width: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(2):
        layers.append(nn.Linear(width, width))
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def test_creation_notes_map_every_style() -> None:
    def build() -> dict[str, nn.Module]:
        model = nn.Sequential(
            nn.Linear(4, 8),
            nn.ReLU(),
            nn.Linear(8, 1),
        )
        grown = nn.Sequential()
        grown.add_module("hidden", nn.Linear(2, 2))
        named = nn.Sequential(OrderedDict([
            ("fc", nn.Linear(2, 2)),
            ("act", nn.Tanh()),
        ]))
        built = _mlp(3)
        wrapped = nn.DataParallel(Net())
        return {"model": model, "grown": grown, "named": named, "built": built, "wrapped": wrapped}

    m = _noted(build)
    locs = {k: map_modules(v) for k, v in m.items()}
    assert _line(locs["model"][""].line) == "model = nn.Sequential(" and locs["model"][""].label == "model"
    assert _line(locs["model"]["0"].line) == "nn.Linear(4, 8)," and locs["model"]["0"].label == "model[0]"
    assert _line(locs["model"]["2"].line) == "nn.Linear(8, 1)," and locs["model"]["2"].site == "test_creation_notes_map_every_style.build|nn.Linear|1"
    assert _line(locs["grown"]["hidden"].line) == 'grown.add_module("hidden", nn.Linear(2, 2))'
    assert locs["grown"]["hidden"].label == "grown.hidden"
    assert _line(locs["named"]["act"].line) == '("act", nn.Tanh()),'
    # a loop in a factory: both Linear layers are instances of one call, the factory's caller names the model
    assert _line(locs["built"]["0"].line) == _line(locs["built"]["2"].line) == "layers.append(nn.Linear(width, width))"
    assert locs["built"]["0"].site == locs["built"]["2"].site and locs["built"][""].label == "built"
    assert _line(locs["built"][""].line) == "return nn.Sequential(*layers)"
    # a wrapper: the inner model's layers keep their class lines, named without the wrapper's "module."
    assert _line(locs["wrapped"]["module.blocks.1.query"].line) == "self.query = nn.Linear(d, d)"
    assert locs["wrapped"]["module.blocks.1.query"].label == "blocks.1.query"
    assert _line(locs["wrapped"]["module"].line) == "wrapped = nn.DataParallel(Net())"
    for found in locs.values():
        assert not any("/torch/" in loc.file for loc in found.values())


class HashedByState(nn.Module):
    """Like torchmetrics' Metric: a hash of state its own __init__ sets (hashing it before then fails)."""

    def __init__(self) -> None:
        super().__init__()
        self._defaults = {"x": 1}

    def __hash__(self) -> int:
        return hash(tuple(self._defaults))


def test_creation_notes_leave_the_modules_untouched() -> None:
    hashed = _noted(HashedByState)  # never hashed half-built
    assert creation.created(hashed) is not None
    plain = Net()
    noted = _noted(Net)
    assert creation.created(noted) is not None and creation.created(plain) is None
    assert nn.Module.__init__ is not None and not getattr(nn.Module.__init__, "__gradsight_creation__", False)  # uninstalled
    for a, b in zip(plain.modules(), noted.modules()):
        assert set(vars(a)) == set(vars(b))  # nothing attached to a module
    copied = copy.deepcopy(noted)
    pickle.loads(pickle.dumps(noted))
    torch.save(noted, io.BytesIO())
    torch.optim.swa_utils.AveragedModel(noted)
    assert creation.created(copied) is None  # a copy was not built by the user's code: the map falls back for it
    before = len(creation._NOTES)
    del noted, copied
    gc.collect()
    assert len(creation._NOTES) < before  # kept weakly


def test_without_notes_the_callers_code_is_read() -> None:
    """A model built before gradsight was watching (watch() after the model): its variable's code, read with ast."""
    model = nn.Sequential(
        nn.Linear(4, 4),
        nn.Tanh(),
    )
    locs = map_modules(model)
    assert _line(locs[""].line) == "model = nn.Sequential(" and locs[""].label == "model"
    assert _line(locs["0"].line) == "nn.Linear(4, 4)," and _line(locs["1"].line) == "nn.Tanh(),"


def test_watch_after_the_model_is_built(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "import gradsight\n"
        "\n"
        "def make():\n"
        "    return nn.Sequential(\n"
        "        nn.Linear(4, 8),\n"
        "        nn.ReLU(),\n"
        "        nn.Linear(8, 1),\n"
        "    )\n"
        "\n"
        "model = make()\n"
        "model.add_module('extra', nn.Identity())\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "with gradsight.watch(model, opt, store='run.db', triggers='none'):\n"
        "    for _ in range(3):\n"
        "        opt.zero_grad()\n"
        "        model(torch.randn(2, 4)).sum().backward()\n"
        "        opt.step()\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "pyserver"), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    lines = script.read_text().splitlines()
    with RunStore(tmp_path / "run.db") as run:
        mods = {m.name: m for m in run.modules()}
    assert lines[mods[""].line - 1].strip() == "return nn.Sequential(" and mods[""].label == "model"
    assert lines[mods["0"].line - 1].strip() == "nn.Linear(4, 8)," and mods["0"].label == "model[0]"
    assert lines[mods["2"].line - 1].strip() == "nn.Linear(8, 1),"
    assert lines[mods["extra"].line - 1].strip() == "model.add_module('extra', nn.Identity())"
    assert all(m.file == str(script) for m in mods.values())
