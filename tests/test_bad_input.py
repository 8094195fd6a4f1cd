"""Bad input of any kind gets a clear error that says what was wrong and where, never a traceback."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sqlite3
import textwrap
import tokenize
from pathlib import Path

import pytest
import torch
from torch import nn

import gradsight
from gradsight.conditions import ConditionError, parse
from gradsight.server.runs import build_view

from .conftest import FAULTS, run_gradsight

BAD_CONDITIONS = {
    "a 300-digit hex literal": ("grad_norm > 0x" + "f" * 300, 13, "beyond the float range"),
    "a literal beyond float range": ("loss > 1e999", 8, "beyond the float range"),
    "990 unary minuses": ("-" * 990 + "loss > 1", 32, "nested too deeply"),
}


@pytest.mark.parametrize("name", list(BAD_CONDITIONS))
def test_bad_conditions_are_refused_at_parse_time(name: str) -> None:
    text, column, what = BAD_CONDITIONS[name]
    with pytest.raises(ConditionError) as err:
        parse(text)
    assert err.value.column == column and what in err.value.message
    assert gradsight.check(text) is False  # a breakpoint condition never raises


def test_bad_conditions_on_the_command_line(tmp_path: Path) -> None:
    for text, column, what in BAD_CONDITIONS.values():
        for option in ("--break", "--trigger"):
            proc = run_gradsight("trace", str(FAULTS), option, text, "--output", str(tmp_path / "x.db"))
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            assert f"column {column}: " in proc.stderr and what in proc.stderr
    assert not (tmp_path / "x.db").exists()


def test_output_paths_that_cannot_be_a_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "folder").mkdir()
    cases = {
        str(tmp_path / "folder"): "is a folder",
        str(tmp_path / "notes.txt" / "run.db"): "is a file, not a folder",
        "/proc/self/run.db": r"(is not writable|cannot be written there)",
    }
    for path, why in cases.items():
        proc = run_gradsight("trace", str(FAULTS), "--steps", "3", "--output", path)
        assert proc.returncode == 2 and re.search(why, proc.stderr) and "Traceback" not in proc.stderr, (path, proc.stderr)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("good") / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", "grad_explode", "--at", "10", "--steps", "20", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    return store


def _damaged(good: Path, tmp_path: Path, sql: str, name: str) -> Path:
    path = tmp_path / f"{name}.db"
    shutil.copy(good, path)
    con = sqlite3.connect(path)
    con.executescript(sql)
    con.commit()
    con.close()
    return path


DAMAGE = {
    "dropped table": "DROP TABLE steps;",
    "garbage blob": "UPDATE metrics SET data = x'0102030405' WHERE kind = 'grad_norm';",
    "non-integer line": "UPDATE modules SET line = 'twelve' WHERE name = 'fc1';",
    "garbage event data": "UPDATE events SET data = '{not json';",
    "text in the steps": "UPDATE steps SET loss = 'high' WHERE step = 3;",
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_store_is_one_clear_message(good_store: Path, tmp_path: Path, damage: str) -> None:
    path = _damaged(good_store, tmp_path, DAMAGE[damage], damage.replace(" ", "_"))
    proc = run_gradsight("diagnose", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gradsight diagnose: {path}: "), lines
    view = build_view(str(path))  # the language server's view of it: an error, no exception
    assert view.data is None and view.error and str(path) in view.error


def test_store_paths_with_uri_characters(tmp_path: Path) -> None:
    for name in ("exp#3.db", "what?.db", "100%.db"):
        proc = run_gradsight("trace", str(FAULTS), "--steps", "5", "--output", name, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        diag = run_gradsight("diagnose", name, "--json", cwd=tmp_path)
        assert diag.returncode == 0, diag.stderr
        assert json.loads(diag.stdout)["run"]["steps"] == 5
    # a reader never creates a file: no stray 'exp' (what the unescaped URI 'file:exp#3.db' would open)
    assert sorted(os.listdir(tmp_path)) == ["100%.db", "exp#3.db", "what?.db"]


def test_a_huge_capture_window_keeps_inputs_within_the_memory_cap(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cap = 8 * 2**20
    with gradsight.watch(model, opt, store=tmp_path / "run.db", capture_window=100_000, capture_bytes=cap) as handle:
        for _ in range(40):
            x = torch.randn(256, 1024)  # 1 MiB a batch: 40 MiB if every batch were kept
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            kept = handle._session.inputs
            assert kept.nbytes <= cap and len(kept) <= 8
    assert len(kept) == 8  # as many as fit, the newest


def _code_tokens(snippet: str) -> list[str]:
    """The snippet's tokens that are code (not strings, not comments)."""
    toks = tokenize.generate_tokens(io.StringIO(textwrap.dedent(snippet)).readline)
    try:
        return [t.string for t in toks if t.type not in (tokenize.STRING, tokenize.COMMENT)]
    except (tokenize.TokenError, IndentationError):
        return []


@pytest.mark.parametrize("evil", ['out; __import__("os").system("echo pwned")', "x\nimport os", "0.weight)\nos.system('id')#"])
def test_a_crafted_module_name_never_reaches_fix_code(good_store: Path, tmp_path: Path, evil: str) -> None:
    """Names in a store are anyone's writing: a module path reaches fix code only through module_ref, which
    turns anything but plain identifiers and indices into a string literal; and diagnose on a store with such
    a name inserts nothing of it as code."""
    from gradsight.fixes import module_ref

    ref = module_ref("model", evil)
    assert ref == f"model.get_submodule({evil!r})"
    code = " ".join(_code_tokens(ref))
    assert "__import__" not in code and "system" not in code and "import os" not in code, ref
    path = _damaged(good_store, tmp_path, "UPDATE modules SET name = ? WHERE name = 'out';".replace("?", "'" + evil.replace("'", "''") + "'"),
                    "crafted")
    proc = run_gradsight("diagnose", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    for fix in json.loads(proc.stdout)["fixes"]:
        code = " ".join(_code_tokens(fix["snippet"]))
        assert "__import__" not in code and "system" not in code, fix["snippet"]
