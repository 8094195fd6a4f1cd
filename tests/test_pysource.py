"""Where modules are created, read with ast alone: call sites, literal containers, a variable's code, readable names,
and the server re-finding each module's line in an edited text (no torch, no LSP)."""

from __future__ import annotations

import ast

from gradsight.pysource import call_index, display_name, static_model
from gradsight.server.sourcemap import resolve
from gradsight.store import ModuleInfo

SCRIPT = '''from collections import OrderedDict
import torch.nn as nn

model = nn.Sequential(
    nn.Linear(4, 8),
    nn.ReLU(),
    nn.Linear(8, 1),
)
tail = nn.Sequential(nn.Linear(1, 4), nn.ReLU(), nn.Linear(4, 1))


def build(width):
    layers = []
    for _ in range(2):
        layers.append(nn.Linear(width, width))
    return nn.Sequential(*layers)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
'''


def test_call_sites_are_named_by_scope_callee_and_place():
    idx = call_index(ast.parse(SCRIPT))
    keys = {(s.line, s.key) for s in idx.by_position.values()}
    assert (5, "|nn.Linear|0") in keys and (7, "|nn.Linear|1") in keys and (9, "|nn.Linear|3") in keys
    assert (15, "build|nn.Linear|0") in keys  # a loop's call, in its function
    assert (22, "Block.__init__|nn.Linear|0") in keys  # a comprehension belongs to the function around it
    assert idx.at(4, 8) is not None and idx.at(4, 8).target == "model"  # type: ignore[union-attr]
    assert idx.find("build|nn.Linear|0").line == 15  # type: ignore[union-attr]
    assert idx.find("build|nn.Linear|7") is None and idx.find("nonsense") is None


def test_a_variables_code_says_where_its_children_are_built():
    tree = ast.parse(SCRIPT)
    m = static_model(tree, "model")
    assert m is not None and m.line == 4 and {k: v[0] for k, v in m.children.items()} == {"0": 5, "1": 6, "2": 7}
    t = static_model(tree, "tail")
    assert t is not None and sorted(t.children) == ["0", "1", "2"] and {v[0] for v in t.children.values()} == {9}
    od = static_model(ast.parse('s = nn.Sequential(OrderedDict([("fc", nn.Linear(1, 1)),\n    ("act", nn.Tanh())]))\n'), "s")
    assert od is not None and od.children == {"fc": (1, 38), "act": (2, 12)}
    assert static_model(tree, "nowhere") is None


def test_readable_names():
    assert display_name("2", "model", container=True) == "model[2]"
    assert display_name("0.hidden", "net", container=True) == "net[0].hidden"
    assert display_name("head-1", "m", container=True) == "m['head-1']"
    assert display_name("module.fc1", "model", frozenset({"module"})) == "fc1"
    assert display_name("blocks.0.query", "model") == "blocks.0.query"
    assert display_name("", "model") == "model" and display_name("", None) == "(model)"


def mod(i: int, name: str, line: int, site: str | None, parent: str | None = "", typ: str = "Linear",
        owner: str | None = None, attr: str | None = None) -> ModuleInfo:
    return ModuleInfo(i, name, typ, "torch.nn", parent, 1, 1, i, "/w/train.py", line, owner, attr, "", site, None)


MODULES = [
    mod(0, "", 4, "|nn.Sequential|0", parent=None, typ="Sequential"),
    mod(1, "0", 5, "|nn.Linear|0"), mod(2, "1", 6, "|nn.ReLU|0", typ="ReLU"), mod(3, "2", 7, "|nn.Linear|1"),
]


def test_lines_are_found_again_by_creating_call_after_edits():
    edited = "# a comment\n# and another\n" + SCRIPT.replace("nn.Linear(4, 8),", "nn.Linear(\n        4, 16),")
    got = {x.module: x.line for x in resolve(MODULES, "/w/train.py", edited) or []}
    lines = edited.splitlines()
    assert lines[got["0"] - 1].strip() == "nn.Linear(" and lines[got["1"] - 1].strip() == "nn.ReLU(),"
    assert lines[got["2"] - 1].strip() == "nn.Linear(8, 1)," and lines[got[""] - 1].startswith("model = nn.Sequential(")
    assert resolve(MODULES, "/w/train.py", "def broken(:\n") is None
    assert resolve(MODULES, "/w/other.py", SCRIPT) == []


def test_instances_are_one_creating_call_not_one_line():
    loop = [mod(0, "", 16, "build|nn.Sequential|0", parent=None, typ="Sequential"),
            mod(1, "0", 15, "build|nn.Linear|0"), mod(2, "1", 15, "build|nn.Linear|0")]
    one_line = [mod(3, "t0", 9, "|nn.Linear|2"), mod(4, "t1", 9, "|nn.ReLU|1", typ="ReLU"), mod(5, "t2", 9, "|nn.Linear|3")]
    found = resolve(loop + one_line, "/w/train.py", SCRIPT) or []
    groups = {x.module: x.group for x in found}
    assert groups["0"] == groups["1"]  # the loop's two layers: instances of one call
    assert len({groups["t0"], groups["t1"], groups["t2"]}) == 3  # three layers written on one line
    assert {x.line for x in found if x.module.startswith("t")} == {9}


def test_modules_read_from_the_code_alone_keep_their_stored_line():
    static = [mod(0, "", 4, None, parent=None, typ="Sequential"), mod(1, "0", 5, None)]
    got = {x.module: x.line for x in resolve(static, "/w/train.py", SCRIPT) or []}
    assert got == {"": 4, "0": 5}
