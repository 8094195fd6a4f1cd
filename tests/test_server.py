"""The language server, driven over stdio by a real LSP client (pytest-lsp), on real traced runs."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from .conftest import FAULTS, ROOT, gradsight_cmd
from .lsp_helpers import SERVER, begin, command, line_of, open_doc, until, workspace_with_run

KINDS = {"exploding_gradient", "vanishing_gradient", "dead_units", "nan_inf", "activation_out_of_range", "saturation", "loss_spike",
         "loss_not_decreasing", "oscillating_loss", "update_ratio_too_high", "update_ratio_too_low", "not_updated", "frozen",
         "learning_rate_too_high", "learning_rate_too_low", "grads_not_zeroed", "double_softmax", "poor_initialization"}


@pytest.fixture(scope="module")
def explode_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MLP of tests/scripts/faults.py with gradients exploding at step 30 of 60."""
    return workspace_with_run(tmp_path_factory.mktemp("ws"), FAULTS, "--fault", "grad_explode", "--at", "30", "--steps", "60")


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient, explode_ws: Path):
    await begin(lsp_client, explode_ws)
    yield
    await lsp_client.shutdown_session()


async def opened(client: LanguageClient, ws: Path) -> tuple[str, str]:
    """Open train.py and wait until the server has sent its health records for it."""
    path = ws / "train.py"
    uri = open_doc(client, path)
    await until(lambda: any(r.uri == uri for n in client.health for r in n.records), what="gradsight/health records for train.py")  # type: ignore[attr-defined]
    return uri, path.read_text()


async def test_hover_on_a_layer_line(client: LanguageClient, explode_ws: Path):
    uri, text = await opened(client, explode_ws)
    line = line_of(text, "self.fc1 = nn.Linear")
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                   position=lsp.Position(line=line, character=12)))
    assert hover is not None
    value = hover.contents.value
    assert "`fc1` (Linear)" in value and "health **" in value
    assert "exploding" in value  # the issue, with its numbers
    assert "grad norm `" in value and any(c in value for c in "▁▂▃▄▅▆▇█")  # the sparkline
    assert "max" in value and "at step 30" in value  # where the norm peaked: the injected step
    assert "command:gradsight.showHeatmap?" in value
    assert "Root cause" in value  # fc1 is on the root cause's path


async def test_hover_on_a_training_loop_line(client: LanguageClient, explode_ws: Path):
    uri, text = await opened(client, explode_ws)
    for needle in ("loss.backward()", "optimizer.step()"):
        hover = await client.text_document_hover_async(lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=line_of(text, needle), character=10)))
        assert hover is not None, needle
        value = hover.contents.value
        assert "step 59" in value  # the run's last step
        assert "loss `" in value and "grad norm (global) `" in value
        assert "**Anomaly**" in value and "at step 30" in value
    # a line that is neither a layer nor the loop: no hover
    blank = await client.text_document_hover_async(lsp.HoverParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=line_of(text, "import argparse"), character=3)))
    assert blank is None


async def test_diagnostics_and_inlay_hints(client: LanguageClient, explode_ws: Path):
    uri, text = await opened(client, explode_ws)
    diags = await until(lambda: client.diagnostics.get(uri), what="diagnostics")
    assert all(d.source == "gradsight" and d.code in KINDS for d in diags)
    fc1 = line_of(text, "self.fc1 =")
    on_fc1 = [d for d in diags if d.range.start.line == fc1]
    assert on_fc1 and on_fc1[0].severity == lsp.DiagnosticSeverity.Error
    assert any("root cause" in d.message for d in diags)
    assert all(d.code_description is not None and d.code_description.href.endswith("#" + str(d.code)) for d in diags)
    hints = await client.text_document_inlay_hint_async(lsp.InlayHintParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri),
        range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=len(text.splitlines()), character=0))))
    lines = {h.position.line: h.label for h in hints}
    for attr in ("fc1", "act", "fc2", "act2", "out"):
        n = line_of(text, f"self.{attr} =")
        assert n in lines and str(lines[n]).startswith("health "), attr
        assert hints[0].position.character == len(text.splitlines()[hints[0].position.line])  # at the end of the line


async def test_lines_follow_edits(client: LanguageClient, explode_ws: Path):
    """Lines are re-found by class and attribute in the edited text, not taken from the store."""
    uri, text = await opened(client, explode_ws)
    edited = "# a comment\n# another\n\n" + text.replace("self.fc2 = nn.Linear(64, 32)", "self.fc2 = nn.Linear(\n            64, 32)")
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=edited)]))
    want = line_of(edited, "self.out = nn.Linear")

    def moved():
        last = client.health[-1].records if client.health else []  # type: ignore[attr-defined]
        return any(r.module == "out" and r.line == want for r in last)

    await until(moved, what="health records at the edited lines")
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                   position=lsp.Position(line=want, character=12)))
    assert hover is not None and "`out` (Linear)" in hover.contents.value


async def test_health_records_are_a_list_of_line_records(client: LanguageClient, explode_ws: Path):
    uri, _ = await opened(client, explode_ws)
    last = client.health[-1]  # type: ignore[attr-defined]
    assert last.step == 59 and last.state.status == "finished"
    rec = next(r for r in last.records if r.module == "fc1")
    assert rec.uri == uri and isinstance(rec.line, int) and 0 <= rec.health <= 100
    assert rec.severity == "error" and rec.summary.startswith(f"health {rec.health} · ")
    # the run's anomalies were announced once each
    assert any(a.step == 30 and a.trigger == "grad_explode" for a in client.anomalies)  # type: ignore[attr-defined]


async def test_conditions_validate_with_columns(client: LanguageClient, explode_ws: Path):
    uri, text = await opened(client, explode_ws)
    bad = await command(client, "gradsight.validateCondition", {"condition": "grad_norm >> 50 and", "uri": uri, "line": 0})
    assert bad["ok"] is False and bad["column"] >= 1 and "column" in bad["error"]
    unknown = await command(client, "gradsight.validateCondition", {"condition": "grad_nrom > 50"})
    assert unknown["ok"] is False and unknown["column"] == 1 and "grad_nrom" in unknown["message"]
    layer = await command(client, "gradsight.validateCondition",
                          {"condition": "grad_norm > 50", "uri": uri, "line": line_of(text, "self.fc1 =")})
    assert layer["ok"] and layer["kind"] == "layer" and layer["scope"] == "fc1"
    assert layer["breakCondition"] == 'layer("fc1").grad_norm > 50'
    loop = await command(client, "gradsight.validateCondition",
                         {"condition": "grad_norm > 50", "uri": uri, "line": line_of(text, "optimizer.step()")})
    assert loop["ok"] and loop["kind"] == "loop" and loop["debugCondition"] == "__import__('gradsight').check(\"grad_norm > 50\")"


async def test_pictures_and_runs(client: LanguageClient, explode_ws: Path):
    await opened(client, explode_ws)
    pic = await command(client, "gradsight.renderPicture", {"kind": "heatmap"})
    assert pic["mime"] == "image/png" and base64.b64decode(pic["data"]).startswith(b"\x89PNG")
    assert pic["anomaly"] == 30 and [m["module"] for m in pic["modules"]][:1] == ["fc1"]
    svg = await command(client, "gradsight.renderPicture", {"kind": "gradient_flow", "format": "svg", "step": 30})
    assert b"<svg" in base64.b64decode(svg["data"])[:500]
    narrowed = await command(client, "gradsight.renderPicture", {"kind": "heatmap", "steps": [20, 40], "modules": "fc*"})
    assert base64.b64decode(narrowed["data"]).startswith(b"\x89PNG")
    with pytest.raises(Exception, match="unknown picture 'pie'"):
        await command(client, "gradsight.renderPicture", {"kind": "pie"})
    runs = await command(client, "gradsight.listRuns")
    assert len(runs["runs"]) == 1 and runs["current"] == runs["runs"][0]["path"] and runs["runs"][0]["status"] == "finished"
    with pytest.raises(Exception, match="no such file"):
        await command(client, "gradsight.openRun", {"path": "nowhere.db"})


def test_server_never_imports_torch():
    code = "import sys, gradsight.server.lsp, gradsight.server.commands; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "pyserver")}, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert subprocess.run([*gradsight_cmd("serve", "--help")], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "pyserver")}).returncode == 0


async def test_requests_on_an_unknown_document_answer_null(client: LanguageClient, explode_ws: Path):
    """A document that is neither open nor on disk: every request on it answers null (no internal error), and the
    server goes on answering for the documents it knows."""
    uri, text = await opened(client, explode_ws)
    ghost = (explode_ws / "gone" / "never_written.py").as_uri()
    ident = lsp.TextDocumentIdentifier(uri=ghost)
    at = lsp.Position(line=3, character=4)
    everywhere = lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=40, character=0))
    assert await client.text_document_hover_async(lsp.HoverParams(text_document=ident, position=at)) is None
    assert await client.text_document_inlay_hint_async(lsp.InlayHintParams(text_document=ident, range=everywhere)) is None
    assert await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=ident, range=everywhere, context=lsp.CodeActionContext(diagnostics=[]))) is None
    assert await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=ident)) is None
    checked = await command(client, "gradsight.validateCondition", {"condition": "grad_norm > 50", "uri": ghost, "line": 3})
    assert checked["ok"] and checked["kind"] == "loop"
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                   position=lsp.Position(line=line_of(text, "self.fc1 ="), character=12)))
    assert hover is not None and "fc1" in hover.contents.value
