"""`gradsight diagnose`: the JSON contract, the terminal summary, the reports, and clear errors for bad stores."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gradsight.analysis.diagnose import SCHEMA
from gradsight.fixes import library, module_ref
from gradsight.script import Script

from .conftest import FAULTS, old_schema_store, run_gradsight, run_that_warned_of_overhead

KINDS = {"exploding_gradient", "vanishing_gradient", "dead_units", "nan_inf", "activation_out_of_range", "saturation", "loss_spike",
         "loss_not_decreasing", "oscillating_loss", "update_ratio_too_high", "update_ratio_too_low", "not_updated", "frozen",
         "learning_rate_too_high", "learning_rate_too_low", "grads_not_zeroed", "double_softmax", "poor_initialization"}


@pytest.fixture(scope="module")
def exploded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("diag") / "run.db"
    proc = run_gradsight("trace", str(FAULTS), "--fault", "nan_inf", "--at", "20", "--steps", "40", "--output", str(store))
    assert proc.returncode == 0, proc.stderr
    return store


def test_json_contract(exploded: Path) -> None:
    proc = run_gradsight("diagnose", str(exploded), "--json")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["schema"] == SCHEMA
    assert d["anomaly"]["step"] == 20 and d["anomaly"]["trigger"] == "nan_inf" and isinstance(d["anomaly"]["metrics"], dict)
    assert isinstance(d["health"], int) and 0 <= d["health"] <= 100
    for layer in d["layers"]:
        assert set(layer) >= {"module", "type", "health", "issues", "source"}
        assert isinstance(layer["health"], int) and 0 <= layer["health"] <= 100
        for issue in layer["issues"]:
            assert issue["kind"] in KINDS and issue["severity"] in ("info", "warning", "error") and issue["evidence"]
        if layer["source"] is not None:
            assert layer["source"]["file"] == str(FAULTS) and isinstance(layer["source"]["line"], int)
    rc = d["root_cause"]
    # a NaN in one input sample: the input is where it starts
    assert rc["module"] == "input" and rc["kind"] == "nan_inf" and 0 < rc["confidence"] <= 1 and rc["path"][0] == "input"
    assert d["fixes"] and all(set(f) >= {"id", "title", "snippet", "validation"} and f["validation"] for f in d["fixes"])


def test_terminal_summary_and_reports(exploded: Path, tmp_path: Path) -> None:
    html_path, pdf_path = tmp_path / "r.html", tmp_path / "r.pdf"
    proc = run_gradsight("diagnose", str(exploded), "--report", str(html_path))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "model health:" in out and "anomaly: nan_inf at step 20" in out and "root cause: input - nan_inf" in out and "fixes:" in out
    page = html_path.read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count("data:image/png;base64,") >= 3
    assert not re.search(r"""(src|href)=['"]https?:""", page)  # self-contained
    assert run_gradsight("diagnose", str(exploded), "--report", str(pdf_path)).returncode == 0
    pdf = pdf_path.read_bytes()
    assert pdf.startswith(b"%PDF") and len(re.findall(rb"/Type\s*/Page[^s]", pdf)) >= 3
    bad = run_gradsight("diagnose", str(exploded), "--report", str(tmp_path / "r.docx"))
    assert bad.returncode == 2 and "must end in .html or .pdf" in bad.stderr


def test_the_runs_own_warnings_are_in_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the runtime warned of (here: gradsight's own cost) is in the terminal summary and the JSON."""
    store = tmp_path / "slowed.db"
    run_that_warned_of_overhead(store, monkeypatch)
    proc = run_gradsight("diagnose", str(store))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"note: at step 39 the run warned \(overhead\): gradsight's own work made steps 20-39 [\d.]+x slower", proc.stdout), proc.stdout
    d = json.loads(run_gradsight("diagnose", str(store), "--json").stdout)
    assert [w["name"] for w in d["run"]["warnings"]] == ["overhead"]


def test_bad_stores_get_clear_messages(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a store")
    proc = run_gradsight("diagnose", str(text))
    assert proc.returncode == 2 and "not a gradsight run store" in proc.stderr
    proc = run_gradsight("diagnose", str(tmp_path / "missing.db"))
    assert proc.returncode == 2 and "no such file" in proc.stderr
    old = old_schema_store(tmp_path / "old.db")
    proc = run_gradsight("diagnose", str(old))
    assert proc.returncode == 2 and "store schema 'gradsight.store/0'" in proc.stderr
    from gradsight.store import StoreWriter

    empty = tmp_path / "empty.db"
    StoreWriter(empty, {"script": "x.py", "status": "running"}).close()
    proc = run_gradsight("diagnose", str(empty))
    assert proc.returncode == 2 and "still being written and has no step yet" in proc.stderr


def test_fix_library_covers_every_kind() -> None:
    fixes = library()
    assert len(fixes) >= 60
    assert {k for f in fixes for k in f.kinds} >= KINDS
    assert len({f.id for f in fixes}) == len(fixes)


def test_fix_generator_uses_the_scripts_names() -> None:
    source = (
        "import torch\nnet = Net()\nopt = torch.optim.AdamW(net.parameters(), lr=1e-3)\nfor xb, yb in loader:\n"
        "    opt.zero_grad()\n    out = net(xb)\n    err = crit(out, yb)\n    err.backward()\n    opt.step()\n"
    )
    script = Script(source)
    assert script.model == "net" and script.optimizer is not None and script.optimizer.var == "opt"
    # where an optimizer, loss or input finding goes: the optimizer's line, the backward (no criterion is
    # constructed here to name the loss call), the model's call on the batch
    assert [script.place_line(p) for p in ("optimizer", "loss", "input")] == [3, 8, 6]
    assert module_ref("net", "blocks.0.attn.query") == "net.blocks[0].attn.query"
