"""The panel's data commands over a real LSP client (pytest-lsp) on a real run of an attention model whose head 1
collapses at step 15 (tests/scripts/attention.py): the heatmap matrix, the sandbox views, the report."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from .conftest import SCRIPTS
from .lsp_helpers import SERVER, begin, command, until, workspace_with_run


@pytest.fixture(scope="module")
def attention_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return workspace_with_run(tmp_path_factory.mktemp("attn"), SCRIPTS / "attention.py")


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, attention_ws: Path):
    await begin(lsp_client, attention_ws)
    await until(lambda: lsp_client.health, what="the first gradsight/health")  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


def finite_json(x: Any) -> bool:
    """No NaN or Inf anywhere (JSON has none: the webview's parser would fail on them)."""
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(finite_json(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(finite_json(v) for v in x)
    return True


async def test_panel_data(client: LanguageClient, attention_ws: Path):
    d = await command(client, "gradsight.panelData", {"maxColumns": 600})
    assert finite_json(d)
    run, g = d["run"], d["gradients"]
    assert run["name"].endswith(".db") and run["script"].endswith("train.py") and run["anomaly"] == {"step": 15, "trigger": "loss_spike", "title": "loss spike"}
    assert g["range"] == [0, 29] and g["steps"] == list(range(30)) and not g["bucketed"]
    labels = [r["label"] for r in g["rows"]]
    assert labels[0] == "embed" and "attn.query" in labels and labels[-1] == "head"
    key = labels.index("attn.key")
    assert g["values"][key][15] > 100 * g["values"][key][10]  # the collapsed queries' keys: their gradient jumps at the anomaly
    assert g["flow"]["step"] == 15 and len(g["flow"]["values"]) == len(labels)
    assert g["loss"]["steps"] == list(range(30)) and g["loss"]["values"][15] > 3 * g["loss"]["values"][10]
    assert all(r["file"] and r["line"] for r in g["rows"])
    # a step range and few columns: buckets hold their largest norm, so the spike survives
    z = await command(client, "gradsight.panelData", {"steps": [5, 25], "maxColumns": 4})
    zg = z["gradients"]
    assert zg["bucketed"] and zg["steps"][0] == 5 and zg["until"][-1] == 25 and len(zg["steps"]) == 4
    spike = next(i for i, (a, b) in enumerate(zip(zg["steps"], zg["until"])) if a <= 15 <= b)
    assert zg["values"][key][spike] == pytest.approx(max(g["values"][key][zg["steps"][spike]: zg["until"][spike] + 1]), rel=1e-4)
    narrowed = await command(client, "gradsight.panelData", {"modules": "attn.*"})
    assert {r["module"] for r in narrowed["gradients"]["rows"]} <= {"attn.query", "attn.key", "attn.value", "attn.out"}
    with pytest.raises(Exception, match="no layer matches"):
        await command(client, "gradsight.panelData", {"modules": "nothing-like-this"})


async def test_sandbox_views(client: LanguageClient, attention_ws: Path):
    att = await command(client, "gradsight.sandbox", {"view": "attention"})
    a = att["data"]
    # activations are captured from the first forward pass after the anomaly (the user's forward is never re-run)
    assert a["module"] == "attn.softmax" and a["step"] == 16 and a["shape"] == [8, 4, 12, 12]
    assert a["collapsed"] == [1] and a["entropy"][1] < 0.15 < min(a["entropy"][0], a["entropy"][2], a["entropy"][3])
    assert a["tokens"] is None or len(a["tokens"]) == 12  # the step's input token ids, when that step's input was kept
    one = await command(client, "gradsight.sandbox", {"view": "attention", "tensor": a["id"], "head": 1, "sample": 3})
    rows = one["data"]["map"]
    assert one["data"]["head"] == 1 and one["data"]["sample"] == 3
    assert all(abs(sum(r) - 1) < 1e-3 for r in rows) and sum(max(r) > 0.9 for r in rows) >= 5  # softmax rows, half of them nearly one-hot
    hist = (await command(client, "gradsight.sandbox", {"view": "histogram", "module": "attn.out"}))["data"]
    assert hist["module"] == "attn.out" and hist["role"] == "activation" and sum(hist["counts"]) == hist["stats"]["n"] == 8 * 12 * 32
    assert len(hist["edges"]) == len(hist["counts"]) + 1
    proj = (await command(client, "gradsight.sandbox", {"view": "projection"}))["data"]
    assert proj["module"] == "embed" and proj["role"] == "weight" and proj["method"] == "pca" and len(proj["x"]) == 32
    pos = (await command(client, "gradsight.sandbox", {"view": "projection", "module": "embed", "tensor": next(
        t["id"] for t in att["tensors"] if t["module"] == "embed" and t["role"] == "activation"), "color": "position"}))["data"]
    assert pos["color"] == "position" and len(pos["x"]) == 8 * 12 and max(pos["c"]) == 11
    samples = (await command(client, "gradsight.sandbox", {"view": "samples"}))["data"]
    assert samples["step"] == 16 and samples["batch"] == 8 and samples["anomalous"] != samples["normal"]
    assert [lay["module"] for lay in samples["layers"]][0] == "embed"
    with pytest.raises(Exception, match="unknown view 'pie'"):
        await command(client, "gradsight.sandbox", {"view": "pie"})
    with pytest.raises(Exception, match="not an attention map"):
        await command(client, "gradsight.sandbox", {"view": "attention", "tensor": hist["id"]})
    assert finite_json([att, hist, proj, samples])


async def test_report_of_the_panel(client: LanguageClient, attention_ws: Path, tmp_path: Path):
    out = tmp_path / "report.pdf"
    r = await command(client, "gradsight.writeReport", {"path": str(out)})
    assert r["path"] == str(out) and out.read_bytes()[:5] == b"%PDF-" and r["bytes"] > 10_000
    with pytest.raises(Exception, match=r"\.pdf or \.html"):
        await command(client, "gradsight.writeReport", {"path": str(tmp_path / "report.docx")})
