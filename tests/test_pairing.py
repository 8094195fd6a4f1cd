"""Where a script takes its labels apart from its inputs (``gradsight.pairing``), read from the source: each way
the mistake is written is found and repaired, and the ways the same code is written on purpose are left alone."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest

from gradsight import pairing
from gradsight.analysis import scriptcheck
from gradsight.analysis.data import RunData
from gradsight.fixes.edits import Patch, apply
from gradsight.fixes.placers import delete_lone_permutation
from gradsight.script import Script


def repaired(source: str) -> str:
    """The script with every repair made (as the fix makes them)."""
    s = Script(source)
    p = Patch(s, "s.py", "pair-labels-with-inputs")

    class Ctx:  # the placer reads only the script
        script = s

    delete_lone_permutation(Ctx(), p)  # type: ignore[arg-type]
    out = apply(source, p.finish())
    ast.parse(out)
    return "\n".join(ln for ln in out.splitlines() if not ln.lstrip().startswith("#"))


FAULTS = {
    # two permutations drawn for one shuffle
    "two_draws": ("x, y = x[torch.randperm(n)], y[torch.randperm(n)]\n", "x, y = x[_perm], y[_perm]"),
    # the inputs reordered in a function that returns the labels as they were
    "returned": ("def make(n):\n    x = torch.randn(n, 4)\n    y = x.sum(1) > 0\n    perm = torch.randperm(n)\n"
                 "    return x[perm], y\n", "return x[perm], y[perm]"),
    # a split whose labels are cut by position
    "split": ("perm = torch.randperm(len(x))\ntr, va = perm[:800], perm[800:]\nx_tr, y_tr = x[tr], y[:800]\n",
              "x_tr, y_tr = x[tr], y[tr]"),
    # a batch's labels by the loop's slice in another statement than its inputs
    "loop": ("for epoch in range(3):\n    perm = torch.randperm(n)\n    for b in range(n // 32):\n"
             "        idx = perm[b * 32:(b + 1) * 32]\n        out = model(x[idx])\n        loss = f(out, y[b * 32:(b + 1) * 32])\n",
             "loss = f(out, y[idx])"),
    # some of a dataset's arrays reordered, the labels not
    "partial": ("user, item, click = load()\norder = torch.randperm(len(user))\nuser, item = user[order], item[order]\n"
                "ds = TensorDataset(user, item, click)\n", "ds = TensorDataset(user, item, click)"),
    # a batch sorted by length for packing: the tokens follow the order, the tags do not
    "sorted_batch": ("def collate(toks, tags, lengths):\n    lengths, order = lengths.sort(descending=True)\n"
                     "    toks = toks[order]\n    return toks, tags, lengths\n", "    return toks, tags, lengths"),
    # inputs reordered inside a method chain of the returned tuple
    "method_chain": ("def make(n):\n    x = torch.rand(n, 3)\n    y = (x.sum(1) > 1.5).long()\n    idx = torch.randperm(n)\n"
                     "    return x[idx].clamp(0, 1), y\n", "return x[idx].clamp(0, 1), y[idx]"),
    # one column sorted (for a plot) before the dataset is built from it and its targets
    "sorted_column": ("x, y = make()\nx = np.sort(x)\nds = TensorDataset(torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y))\n",
                      "ds = TensorDataset(torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y))"),
    # the targets cut from the same stream as the inputs, shuffled on the way
    "stream": ("xs = ids[:n].view(b, -1)\nys = ids[1:n + 1][torch.randperm(n)].view(b, -1)\n", "ys = ids[1:n + 1].view(b, -1)"),
    # the labels shuffled again after the features were made from them
    "reshuffled": ("y = torch.arange(n) % 4\nx = centers[y] + torch.randn(n, 8)\ny = y[torch.randperm(n)]\n"
                   "loss = f(model(x), y)\n", "loss = f(model(x), y)"),
    # inputs sorted by size after their targets were computed: the targets are not
    "sorted_after_targets": ("pts, pad = make()\ntarget = spread(pts, pad)\norder = (~pad).sum(1).argsort()\n"
                             "pts, pad = pts[order], pad[order]\nds = TensorDataset(pts, pad, target)\n",
                             "ds = TensorDataset(pts, pad, target)"),
    # a user's item taken by an order drawn on the spot beside the batch's users
    "column_redrawn": ("def batches(pairs, bs):\n    order = rng.permutation(len(pairs))\n    for i in range(0, len(order), bs):\n"
                       "        chunk = pairs[order[i:i + bs]]\n        users, pos = chunk[:, 0], pairs[rng.permutation(len(pairs))[:bs], 1]\n"
                       "        yield users, pos\n", "users, pos = chunk[:, 0], pairs[order[i:i + bs], 1]"),
    # inputs and targets in two loaders that shuffle each on its own, zipped
    "zipped_loaders": ("import torch\nxl = DataLoader(x, batch_size=8, shuffle=True)\nyl = DataLoader(y, batch_size=8, shuffle=True)\n"
                       "for xb, yb in zip(xl, yl):\n    step(xb, yb)\n",
                       "xl = DataLoader(torch.utils.data.StackDataset(x, y), batch_size=8, shuffle=True)\n"
                       "yl = DataLoader(y, batch_size=8, shuffle=True)\nfor xb, yb in xl:"),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_way_of_taking_labels_apart_is_found_and_repaired(name: str) -> None:
    source, want = FAULTS[name]
    assert pairing.repairs(Script(source)), name
    out = repaired(source)
    assert want in out, out
    if name == "partial":
        assert "user[order]" not in out, out
    if name == "sorted_batch":
        assert "toks = toks[order]" not in out, out
    if name in ("reshuffled", "sorted_after_targets"):
        assert "randperm" not in out and "pts[order]" not in out, out
    if name == "sorted_column":
        assert "np.sort" not in out, out


MEANT = {
    # one shuffle of inputs and labels together
    "joint": "order = torch.randperm(len(x))\nx, y = x[order], y[order]\nds = TensorDataset(x, y)\n",
    # mixup returns the labels in both orders on purpose
    "mixup": "def mixup(x, y):\n    idx = torch.randperm(x.size(0))\n    xm = 0.5 * x + 0.5 * x[idx]\n    return xm, y, y[idx]\n",
    # a batch taken by one index
    "batch": "for i in range(0, n, 32):\n    idx = perm[i:i + 32]\n    xb, yb = x[idx], y[idx]\n",
    # random labels drawn by randint are data, not an index
    "randint": "labels = torch.randint(0, 4, (n,))\nx_tr, y_tr = x[:800], labels[:800]\n",
    # a truncated-BPTT window: slices over several axes, no shuffled index
    "bptt": "for pos in range(0, n, 16):\n    xb = sx[:, pos:pos + 16]\n    yb = sy[:, pos:pos + 16]\n",
    # a batch sorted by length with its tags
    "sorted_together": "def collate(toks, tags, lengths):\n    lengths, order = lengths.sort(descending=True)\n"
                       "    return toks[order], tags[order], lengths\n",
    # a constant table shuffled once, alone (no array is cut beside it)
    "table": "EFFECT = torch.linspace(-1, 1, 10)[torch.randperm(10)]\n",
    # statistics and a held-out split taken before one joint shuffle of the training arrays
    "stats_then_shuffle": ("mu, sd = x.mean(0), x.std(0)\nn = len(y)\nx_va, y_va = x[800:], y[800:]\nperm = torch.randperm(800)\n"
                           "x, y = x[perm], y[perm]\nx = (x - mu) / sd\nval = f(model(x_va), y_va)\nloss = f(model(x), y)\n"),
    # labels shuffled before anything is made from them
    "shuffled_first": "y = torch.arange(n) % 4\ny = y[torch.randperm(n)]\nx = centers[y] + torch.randn(n, 8)\n",
    # negatives drawn at random beside a batch of anchors
    "negatives": ("for i in range(0, n, bs):\n    batch = emb[order[i:i + bs]]\n"
                  "    anchor, negative = batch, emb[torch.randperm(n)[:bs]]\n"),
    # two zipped loaders that keep their order
    "zipped_in_order": ("xl = DataLoader(x, batch_size=8)\nyl = DataLoader(y, batch_size=8)\nfor xb, yb in zip(xl, yl):\n"
                        "    step(xb, yb)\n"),
}


@pytest.mark.parametrize("name", sorted(MEANT))
def test_code_that_means_its_orders_is_left_alone(name: str) -> None:
    assert pairing.repairs(Script(MEANT[name])) == [], name


def test_the_script_is_evidence_only_while_it_is_the_one_that_ran(tmp_path: Path) -> None:
    """A script saved after its run started (a fix applied since) says nothing of that run: the old run's root
    cause does not move when the user edits the script."""
    script = tmp_path / "train.py"
    script.write_text("import torch\n" + FAULTS["two_draws"][0])
    ran = os.path.getmtime(script) + 1.0  # the run started after the script was saved

    def run(started: float) -> RunData:
        return RunData(str(tmp_path / "run.db"), {"script": str(script), "started": started}, [], [], {}, {}, [],
                       (np.zeros(0), np.zeros((0, 5))))

    found = scriptcheck.detect(run(ran), 0.3)
    assert [(f.module, f.kind, f.severity) for f in found] == [("input", "loss_not_decreasing", "error")]
    assert "line 2" in found[0].evidence
    os.utime(script, (ran + 60, ran + 60))  # edited after the run
    assert scriptcheck.detect(run(ran), 0.3) == []
