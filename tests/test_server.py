"""The language server, driven over stdio by a real LSP client (pytest-lsp), on real traced runs."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.uris import to_fs_path
from pytest_lsp import LanguageClient

from .conftest import FAULTS, ROOT, gradsight_cmd
from .lsp_helpers import SERVER, apply_edit, begin, command, line_of, open_doc, until, workspace_with_run

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


# -- fixes in the editor: the light bulb, the CodeLens, validation -----------------------------------------------------
async def cause_and_fixes(client: LanguageClient, ws: Path) -> tuple[str, str, lsp.Diagnostic, list[dict[str, Any]]]:
    """train.py open, its root-cause diagnostic, and the fixes the editor offers (placed, not hidden), best first."""
    uri, text = await opened(client, ws)
    diags = await until(lambda: [d for d in client.diagnostics.get(uri, []) if "root cause" in d.message], what="the root-cause diagnostic")
    fixes = [f for f in await command(client, "gradsight.fixes") if f["place"] and not f["hidden"]]
    assert fixes, "no fix with a place in train.py"
    return uri, text, diags[0], fixes


def fix_edits(fix: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    """A fix's edits as (file, 0-based first line, 0-based end line, text): its own ``edits`` (the fix contract), else
    the single insertion the server made of a fix of the older shape."""
    if fix.get("edits"):
        return sorted((str(Path(e["file"]).resolve()), e["start"] - 1, e["end"] - 1, e["text"]) for e in fix["edits"])
    return sorted((str(Path(to_fs_path(e["uri"])).resolve()), e["start"], e["end"], e["text"]) for e in fix["place"]["edits"])


def action_edits(action: lsp.CodeAction) -> list[tuple[str, int, int, str]]:
    assert action.edit is not None and action.edit.changes
    return sorted((str(Path(to_fs_path(uri)).resolve()), e.range.start.line, e.range.end.line, e.new_text)
                  for uri, es in action.edit.changes.items() for e in es)


async def actions_at(client: LanguageClient, uri: str, line: int, diagnostics: list[lsp.Diagnostic] | None = None) -> list[lsp.CodeAction]:
    rng = lsp.Range(start=lsp.Position(line=line, character=0), end=lsp.Position(line=line, character=0))
    got = await client.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=rng, context=lsp.CodeActionContext(diagnostics=diagnostics or [])))
    return [a for a in got or [] if isinstance(a, lsp.CodeAction)]


async def test_code_action_on_the_root_cause_and_on_the_line_the_fix_goes_to(client: LanguageClient, explode_ws: Path):
    uri, text, cause, fixes = await cause_and_fixes(client, explode_ws)
    cause_line = cause.range.start.line
    on_cause = await actions_at(client, uri, cause_line, [cause])
    assert on_cause and all(a.title.startswith("Apply fix: ") and a.kind == lsp.CodeActionKind.QuickFix for a in on_cause)
    top = fixes[0]
    first = on_cause[0]
    assert first.is_preferred and first.data["fix"] == top["id"] and [a.is_preferred for a in on_cause].count(True) == 1
    assert first.title == f"Apply fix: {top['place']['label']}" and list(first.diagnostics or ()) == [cause]
    # one WorkspaceEdit holding the fix's edits (line ranges in the current text), for every fix offered
    by_id = {f["id"]: f for f in fixes}
    for a in on_cause:
        assert action_edits(a) == fix_edits(by_id[a.data["fix"]]), a.title
    patched = apply_edit(text, first.edit, uri)
    assert patched != text and f"# gradsight fix '{top['id']}'" in patched
    compile(patched, "train.py", "exec")  # the patched script still parses
    # the light bulb also stands where a fix goes, when that is not the root cause's line (clipping in the loop, ...)
    elsewhere = [f for f in fixes if f["place"]["line"] != cause_line and to_fs_path(f["place"]["uri"]) == to_fs_path(uri)]
    assert elsewhere, f"every fix goes to the root cause's line {cause_line}: {[(f['id'], f['place']['line']) for f in fixes]}"
    for f in elsewhere:
        there = await actions_at(client, uri, f["place"]["line"])
        offered = next((a for a in there if a.data["fix"] == f["id"]), None)
        assert offered is not None, (f["id"], f["place"]["line"], [a.title for a in there])
        assert action_edits(offered) == fix_edits(f)
    # a line that is neither: no light bulb
    assert await actions_at(client, uri, line_of(text, "import argparse")) == []


async def test_code_lens_apply_fix_and_validate_fixes(client: LanguageClient, explode_ws: Path):
    uri, text, cause, fixes = await cause_and_fixes(client, explode_ws)
    run = str(next((explode_ws / ".gradsight" / "runs").glob("*.db")))
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert lenses and {ln.range.start.line for ln in lenses} == {cause.range.start.line}  # above the root cause's line
    commands_ = [ln.command for ln in lenses if ln.command is not None]
    apply = next(c for c in commands_ if c.command == "gradsight.applyFix")
    assert apply.title == f"Apply fix: {fixes[0]['place']['label']}" and list(apply.arguments or ()) == [{"id": fixes[0]["id"]}]
    validate = next(c for c in commands_ if c.command == "gradsight.validate")
    assert validate.title.startswith("Validate fixes") and list(validate.arguments or ()) == [{"run": run, "top": 3}]
    assert [c.command for c in commands_] == ["gradsight.applyFix", "gradsight.validate", "gradsight.showHeatmap"]
    # the lens's command applies the fix through the client (workspace/applyEdit)
    received: list[lsp.ApplyWorkspaceEditParams] = []

    def on_apply(params: lsp.ApplyWorkspaceEditParams) -> lsp.ApplyWorkspaceEditResult:
        received.append(params)
        return lsp.ApplyWorkspaceEditResult(applied=True)

    client.feature(lsp.WORKSPACE_APPLY_EDIT)(on_apply)
    result = await command(client, apply.command, *(apply.arguments or ()))
    assert result["applied"] and result["id"] == fixes[0]["id"] and received
    patched = apply_edit(text, received[0].edit, uri)
    assert f"# gradsight fix '{fixes[0]['id']}'" in patched
    compile(patched, "train.py", "exec")
    # the hover on the root cause's line lists the fixes, best first, each with an Apply link
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                   position=lsp.Position(line=cause.range.start.line, character=4)))
    assert hover is not None and "**Fixes**" in hover.contents.value and fixes[0]["title"] in hover.contents.value
    assert "command:gradsight.applyFix?" in hover.contents.value


async def test_validate_fails_clearly(client: LanguageClient, explode_ws: Path):
    await opened(client, explode_ws)
    junk = explode_ws / "notastore.db"
    junk.write_text("not a run store\n")
    with pytest.raises(Exception, match=r"gradsight validate notastore\.db: \S"):
        await command(client, "gradsight.validate", {"run": str(junk), "top": 1})
    with pytest.raises(Exception, match="no such run store"):
        await command(client, "gradsight.validate", {"run": "nowhere.db"})
    with pytest.raises(Exception, match="top must be"):
        await command(client, "gradsight.validate", {"top": 0})
    ended = [v for reports in client.progress_reports.values() for v in reports if isinstance(v, lsp.WorkDoneProgressEnd)]
    assert any((v.message or "").startswith("failed: ") for v in ended)  # the progress the failed run began has ended


@pytest.mark.slow
async def test_validate_fixes_with_progress_then_validated_fixes_first(client: LanguageClient, explode_ws: Path):
    """``gradsight.validate`` re-runs the script with its best fixes (the real ``gradsight validate``), reporting
    work-done progress on the client's token; then the editor shows each fix's verdict, validated ones first."""
    uri, _text, cause, before = await cause_and_fixes(client, explode_ws)
    run = str(next((explode_ws / ".gradsight" / "runs").glob("*.db")))
    client.progress_reports["validate-token"] = []
    result = await client.workspace_execute_command_async(lsp.ExecuteCommandParams(
        command="gradsight.validate", arguments=[{"run": run, "top": 2}], work_done_token="validate-token"))
    assert result["run"] == run and result["fixes"], result
    verdicts = {f["id"]: f["verdict"] for f in result["fixes"]}
    assert set(verdicts.values()) <= {"validated", "did_not_help", "worse", "failed"}
    assert set(verdicts) <= {f["id"] for f in before}
    reports = client.progress_reports["validate-token"]
    assert isinstance(reports[0], lsp.WorkDoneProgressBegin) and isinstance(reports[-1], lsp.WorkDoneProgressEnd)
    assert any(isinstance(r, lsp.WorkDoneProgressReport) and "/" in (r.message or "") for r in reports)  # validate: i/n lines
    after = await command(client, "gradsight.fixes")
    got = {f["id"]: (f["validated"] or {}).get("verdict") for f in after}
    # each verdict shows on its fix (a fix that did not help may fall out of the list: the others come first)
    assert {i: got[i] for i in verdicts if i in got} == {i: v for i, v in verdicts.items() if i in got}
    assert all(i in got for i, v in verdicts.items() if v == "validated")
    rank = {"validated": 0, None: 1, "did_not_help": 2, "worse": 3, "failed": 3}
    assert [rank[v] for v in got.values()] == sorted(rank[v] for v in got.values())  # validated first
    offered = await actions_at(client, uri, cause.range.start.line, [cause])
    for a in offered:
        v = verdicts.get(a.data["fix"])
        assert v not in ("worse", "failed"), a.title  # a fix that made it worse is not offered
        assert a.title.endswith(" (validated)") == (v == "validated") and a.data["verdict"] == got[a.data["fix"]]
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    titles = [ln.command.title for ln in lenses if ln.command is not None]
    assert any(t.startswith("Validate fixes again (") for t in titles), titles
    validated = [i for i, v in verdicts.items() if v == "validated"]
    if validated:  # the hover shows what the re-run measured
        effect = next(f for f in result["fixes"] if f["id"] == validated[0])
        hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                       position=lsp.Position(line=cause.range.start.line, character=4)))
        assert hover is not None and "validated: " in hover.contents.value
        assert " ".join((effect.get("effect") or effect.get("summary") or "").split())[:40] in hover.contents.value


async def test_a_validation_shows_in_the_code_lens_and_can_be_cancelled(client: LanguageClient, explode_ws: Path):
    uri, _text, _cause, _fixes = await cause_and_fixes(client, explode_ws)
    run = str(next((explode_ws / ".gradsight" / "runs").glob("*.db")))
    job = asyncio.ensure_future(command(client, "gradsight.validate", {"top": 3}))
    await until(lambda: any(isinstance(v, lsp.WorkDoneProgressBegin) for r in client.progress_reports.values() for v in r),
                what="the validation's progress to begin")
    lenses = await client.text_document_code_lens_async(lsp.CodeLensParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert "Validate fixes: running…" in [ln.command.title for ln in lenses if ln.command is not None]
    assert (await command(client, "gradsight.cancelValidate", {}))["cancelled"] == [run]
    with pytest.raises(Exception, match="was cancelled"):
        await job
    ends = [v for r in client.progress_reports.values() for v in r if isinstance(v, lsp.WorkDoneProgressEnd)]
    assert [v.message for v in ends] == ["cancelled"]
    assert (await command(client, "gradsight.cancelValidate", {}))["cancelled"] == []  # nothing left running
