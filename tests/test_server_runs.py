"""The language server with runs as they happen: live notifications, run switching, and fixes validated by tracing again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from gradsight.store import RunStore

from .conftest import FAULTS, ROOT, SCRIPTS, run_gradsight, run_that_warned_of_overhead
from .lsp_helpers import SERVER, apply_edit, begin, collect, command, line_of, open_doc, trace_in_background, until, workspace_with_run

SCENARIOS = ROOT / "tests" / "scenarios"


@pytest_lsp.fixture(config=SERVER)
async def live(lsp_client: LanguageClient, tmp_path: Path):
    """A server on a workspace with one short finished run."""
    workspace_with_run(tmp_path, FAULTS, "--steps", "20")
    await begin(lsp_client, tmp_path)
    yield
    await lsp_client.shutdown_session()


async def test_health_streams_while_a_run_writes_its_store(live: LanguageClient):
    ws: Path = live.ws  # type: ignore[attr-defined]
    first = next((ws / ".gradsight" / "runs").glob("*.db"))
    uri = open_doc(live, ws / "train.py")
    await until(lambda: any(n.run == str(first) and n.records for n in live.health), what="the finished run's records")  # type: ignore[attr-defined]
    proc = trace_in_background(ws, ".gradsight/runs/second.db", "--fault", "grad_explode", "--at", "150", "--steps", "300", "--sleep", "0.02")
    try:
        second = str(ws / ".gradsight" / "runs" / "second.db")

        def live_steps() -> list[int]:
            return [n.step for n in live.health if n.run == second and n.step is not None and n.state.status == "running"]  # type: ignore[attr-defined]

        # the server switched to the new run and streams its steps while the process still writes
        await until(lambda: len(set(live_steps())) >= 3 and proc.poll() is None, timeout=60, what="three live steps of the new run")
        steps = live_steps()
        assert steps == sorted(steps)
        live_record = next(n for n in live.health if n.run == second and n.records)  # type: ignore[attr-defined]
        assert {r.uri for r in live_record.records} == {uri}
        assert {"fc1", "act", "fc2", "act2", "out"} <= {r.module for r in live_record.records}
        # the injected explosion reaches the editor as an anomaly, with the layer's line
        anomaly = await until(lambda: next((a for a in live.anomalies if a.run == second and a.trigger == "grad_explode"), None),  # type: ignore[attr-defined]
                              timeout=60, what="the grad_explode anomaly")
        assert anomaly.step == 150
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    final = await until(lambda: next((n for n in live.health if n.run == second and n.state.status == "finished"), None),  # type: ignore[attr-defined]
                        what="the finished state")
    assert final.step == 299


async def test_a_watch_set_in_the_editor_reaches_the_running_run(live: LanguageClient):
    """validateCondition with install on a layer line writes a scoped watch the running process picks up."""
    ws: Path = live.ws  # type: ignore[attr-defined]
    text = (ws / "train.py").read_text()
    uri = open_doc(live, ws / "train.py")
    proc = trace_in_background(ws, ".gradsight/runs/watched.db", "--fault", "grad_explode", "--at", "150", "--steps", "300", "--sleep", "0.02")
    try:
        watched = str(ws / ".gradsight" / "runs" / "watched.db")
        await until(lambda: any(n.run == watched and n.state.status == "running" and n.step is not None and n.records for n in live.health),  # type: ignore[attr-defined]
                    timeout=60, what="the run to stream")
        result = await command(live, "gradsight.validateCondition",
                               {"condition": "grad_norm > 1000", "uri": uri, "line": line_of(text, "self.fc1 = nn.Linear"), "install": True})
        assert result["ok"] and result["kind"] == "layer" and result["scope"] == "fc1" and result["run"] == watched
        assert isinstance(result["watchId"], int)
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == 0
    with RunStore(watched) as store:
        assert [w["condition"] for w in store.watches()] == ["grad_norm > 1000"]
        fired = [e for e in store.events("breakpoint") if e.name == "watch"]
    assert [(e.step, e.module) for e in fired] == [(150, "fc1")]


# (scenario, the fix expected first on the root cause's line)
FIXES = [("missing_zero_grad", "zero-grad-each-step"), ("eval_batchnorm", "train-mode"), ("unnormalized_input", "standardize-input")]


@pytest_lsp.fixture(config=SERVER, params=FIXES, ids=[f[0] for f in FIXES])
async def faulty(lsp_client: LanguageClient, tmp_path: Path, request: pytest.FixtureRequest):
    scenario, fix = request.param
    workspace_with_run(tmp_path, SCENARIOS / f"{scenario}.py", extra=(SCENARIOS / "_common.py",))
    lsp_client.case = (tmp_path, scenario, fix)  # type: ignore[attr-defined]
    await begin(lsp_client, tmp_path)
    yield
    await lsp_client.shutdown_session()


@pytest.mark.slow
async def test_fix_from_code_action_removes_the_fault(faulty: LanguageClient):
    ws, scenario, fix_id = faulty.case  # type: ignore[attr-defined]
    script = ws / "train.py"
    expected = _expected(script)
    text = script.read_text()
    uri = open_doc(faulty, script, text)
    diags = await until(lambda: [d for d in faulty.diagnostics.get(uri, []) if "root cause" in d.message], what="the root-cause diagnostic")
    cause = diags[0]
    assert cause.code == expected["kind"] and cause.data["module"] == expected["module"]
    actions = await faulty.text_document_code_action_async(lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=cause.range, context=lsp.CodeActionContext(diagnostics=[cause])))
    assert actions and all(a.title.startswith("Apply fix: ") for a in actions)
    preferred = next(a for a in actions if a.is_preferred)
    assert preferred.data["fix"] == fix_id
    fixed = apply_edit(text, preferred.edit, uri)
    assert f"# gradsight fix '{fix_id}'" in fixed
    compile(fixed, "train.py", "exec")
    script.write_text(fixed)
    faulty.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=fixed)]))
    # the validation, for real: trace the fixed script again
    r = run_gradsight("trace", "train.py", "--output", ".gradsight/runs/fixed.db", cwd=ws)
    assert r.returncode == 0, r.stderr
    d = json.loads(run_gradsight("diagnose", ".gradsight/runs/fixed.db", "--json", cwd=ws).stdout)
    rc = d["root_cause"]
    assert rc is None or (rc["module"], rc["kind"]) != (expected["module"], expected["kind"]), rc
    # and the editor follows: the new run has no such root cause on this file
    fixed_db = str(ws / ".gradsight" / "runs" / "fixed.db")
    await until(lambda: any(n.run == fixed_db for n in faulty.health), what="the server to follow the fixed run")  # type: ignore[attr-defined]
    await until(lambda: not [d for d in faulty.diagnostics.get(uri, []) if "root cause" in d.message and d.code == expected["kind"]],
                what="the root-cause diagnostic to go")


def _expected(script: Path) -> dict[str, str]:
    for line in script.read_text().splitlines():
        if line.startswith("EXPECTED = "):
            return json.loads(line.split("=", 1)[1].strip().replace("'", '"'))
    raise AssertionError("scenario without EXPECTED")




@pytest_lsp.fixture(config=SERVER)
async def bert(lsp_client: LanguageClient, tmp_path: Path):
    """A tiny transformers BERT: its layer lines live in transformers' own source and stand for several instances."""
    workspace_with_run(tmp_path, SCRIPTS / "bert_train.py")
    await begin(lsp_client, tmp_path)
    yield
    await lsp_client.shutdown_session()


async def test_one_line_stands_for_all_its_instances(bert: LanguageClient):
    ws: Path = bert.ws  # type: ignore[attr-defined]
    with RunStore(next((ws / ".gradsight" / "runs").glob("*.db"))) as store:
        query = next(m for m in store.modules() if m.name == "bert.encoder.layer.0.attention.self.query")
    assert query.file and query.file.endswith("modeling_bert.py")
    source = Path(query.file)
    uri = open_doc(bert, source)
    records = await until(lambda: [r for n in bert.health for r in n.records if r.uri == uri], what="records for modeling_bert.py")  # type: ignore[attr-defined]
    line = line_of(source.read_text(), "self.query = nn.Linear")
    on_line = next(r for r in records if r.line == line)
    assert on_line.instances == 2 and on_line.module.endswith(".attention.self.query")
    hover = await bert.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                 position=lsp.Position(line=line, character=12)))
    assert hover is not None and "(worst of 2 instances)" in hover.contents.value
    for i in (0, 1):
        assert f"`bert.encoder.layer.{i}.attention.self.query`" in hover.contents.value
    watch = await command(bert, "gradsight.validateCondition", {"condition": "grad_norm > 50", "uri": uri, "line": line})
    assert watch["scope"] == "bert.encoder.layer.*.attention.self.query"
    assert watch["breakCondition"] == 'layer("bert.encoder.layer.*.attention.self.query").grad_norm > 50'


@pytest.fixture
def slowed_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace whose run warned that gradsight slowed its steps."""
    run_that_warned_of_overhead(tmp_path / ".gradsight" / "runs" / "slowed.db", monkeypatch)
    return tmp_path


@pytest_lsp.fixture(config=SERVER)
async def slowed(lsp_client: LanguageClient, slowed_ws: Path):
    lsp_client.warnings = collect(lsp_client, "gradsight/warning")  # type: ignore[attr-defined]
    await begin(lsp_client, slowed_ws)
    yield
    await lsp_client.shutdown_session()


async def test_the_runtimes_overhead_warning_reaches_the_editor(slowed: LanguageClient):
    """gradsight's own slowdown, measured by the runtime, arrives once as a gradsight/warning and stays in the run's state."""
    ws: Path = slowed.ws  # type: ignore[attr-defined]
    run = str(ws / ".gradsight" / "runs" / "slowed.db")
    warning = await until(lambda: next((w for w in slowed.warnings if w.name == "overhead"), None),  # type: ignore[attr-defined]
                          what="the overhead warning")
    assert warning.run == run and warning.step == 39  # the window after the one holding the session's start
    assert warning.value > 0 and "own work made steps 20-39" in warning.message and "activation statistics every 1 step" in warning.message
    with RunStore(run) as store:
        share = next(e.value for e in store.events("warning") if e.name == "overhead")
    state = await command(slowed, "gradsight.state")
    assert state["slowdown"] == pytest.approx(1 + share) and state["overhead"] == warning.message
    assert not slowed.anomalies  # type: ignore[attr-defined]  (the tool's cost is not the model's fault)
    await command(slowed, "gradsight.openRun", {"path": run})  # announcing again sends nothing new
    assert len([w for w in slowed.warnings if w.name == "overhead"]) == 1  # type: ignore[attr-defined]
