"""The editor on every way a model is written: hover, diagnostics and decoration records from a real LSP client
(pytest-lsp) on real traced runs of tutorial-style scripts (tests/scripts/styles/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pytest_lsp import LanguageClient

from .conftest import SCRIPTS
from .lsp_helpers import SERVER, begin, command, line_of, open_doc, until, workspace_with_run

STYLES = SCRIPTS / "styles"


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each style script traced once (its fault: an unnormalised batch at step 20)."""
    root = tmp_path_factory.mktemp("styles")
    return {name: workspace_with_run(root / name, STYLES / f"{name}.py") for name in ("seq_module", "add_module", "factory", "ddp", "compiled")}


@pytest_lsp.fixture(config=SERVER)
async def client(lsp_client: LanguageClient):
    yield
    await lsp_client.shutdown_session()


async def session(client: LanguageClient, ws: Path) -> tuple[str, str, list[Any]]:
    """Start on ``ws``, open train.py, and return its uri, text and the health records the server sent for it."""
    await begin(client, ws)
    uri = open_doc(client, ws / "train.py")
    records = await until(lambda: [r for n in client.health[-1:] for r in n.records if r.uri == uri],  # type: ignore[attr-defined]
                          what="gradsight/health records for train.py")
    return uri, (ws / "train.py").read_text(), records


async def hover(client: LanguageClient, uri: str, line: int) -> str | None:
    got = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                                                 position=lsp.Position(line=line, character=8)))
    return None if got is None else got.contents.value


def by_line(records: list[Any]) -> dict[int, Any]:
    return {r.line: r for r in records}


async def test_module_level_sequential(client: LanguageClient, workspaces: dict[str, Path]):
    uri, text, records = await session(client, workspaces["seq_module"])
    lines = by_line(records)
    # every argument of the module-level nn.Sequential(...) is its own layer line, named model[i]
    for i, needle in enumerate(["nn.Linear(16, 64),", "nn.ReLU(),", "nn.Linear(64, 32),"]):
        n = line_of(text, needle)
        assert n in lines and lines[n].label == f"model[{i}]" and lines[n].module == str(i), (needle, lines.get(n))
        assert lines[n].instances == 1 and lines[n].layers == 1
    # the model's own line carries the model's health, not its root module's 100
    state = await command(client, "gradsight.state")
    model = lines[line_of(text, "model = nn.Sequential(")]
    assert model.model and model.health == state["health"] < 100 and model.summary.startswith(f"model health {state['health']}")
    first = line_of(text, "nn.Linear(16, 64),")
    value = await hover(client, uri, first)
    assert value is not None and "`model[0]` (`0`) (Linear)" in value and "exploding" in value
    assert "command:gradsight.showHeatmap?" in value
    model_hover = await hover(client, uri, line_of(text, "model = nn.Sequential("))
    assert model_hover is not None and f"model health **{state['health']}**/100" in model_hover and "model[0]" in model_hover
    diags = await until(lambda: client.diagnostics.get(uri), what="diagnostics on train.py")
    assert any(d.range.start.line == first and d.code == "exploding_gradient" and "model[0]" in d.message for d in diags)
    # nothing of the run points into torch's own files
    diagnosis = await command(client, "gradsight.diagnosis")
    assert all("torch/nn" not in (layer["source"] or {}).get("file", "") for layer in diagnosis["layers"])


async def test_add_module_model(client: LanguageClient, workspaces: dict[str, Path]):
    uri, text, records = await session(client, workspaces["add_module"])
    lines = by_line(records)
    hidden = lines[line_of(text, 'model.add_module("hidden"')]
    assert hidden.label == "net[0].hidden" and hidden.module == "0.hidden"
    assert lines[line_of(text, "out = nn.Linear(64, 1)")].label == "net[0].out"  # built first, added later: where it was built
    assert lines[line_of(text, '("fc", nn.Linear(1, 8)),')].label == "net[1].fc"  # an OrderedDict Sequential
    value = await hover(client, uri, line_of(text, 'model.add_module("hidden"'))
    assert value is not None and "`net[0].hidden` (`0.hidden`) (Linear)" in value
    diags = await until(lambda: client.diagnostics.get(uri), what="diagnostics on train.py")
    assert {d.range.start.line for d in diags} & set(lines)


async def test_factory_function_model(client: LanguageClient, workspaces: dict[str, Path]):
    uri, text, records = await session(client, workspaces["factory"])
    lines = by_line(records)
    # a layer appended in a loop: one line, two instances of one creating call
    looped = lines[line_of(text, "layers.append(nn.Linear(width, width))")]
    assert looped.instances == 2 and looped.layers == 1 and "instances" in looped.summary
    assert looped.module in ("0.2", "0.4") and looped.label in ("model[0][2]", "model[0][4]")
    # a comprehension: the ModuleList's Linear instances (the container itself is not a layer on its children's line)
    blocks = lines[line_of(text, "self.blocks = nn.ModuleList(")]
    assert blocks.instances == 2 and blocks.module.startswith("1.blocks.")
    # three different layers written on one line are not "instances"
    proj = lines[line_of(text, "self.proj = nn.Sequential(")]
    assert proj.layers == 3 and proj.instances == 1 and "instances" not in proj.summary and "3 layers" in proj.summary
    value = await hover(client, uri, line_of(text, "self.proj = nn.Sequential("))
    assert value is not None and "| layer | type | health | issues |" in value and "instance" not in value
    value = await hover(client, uri, line_of(text, "layers.append(nn.Linear(width, width))"))
    assert value is not None and "(worst of 2 instances)" in value
    assert lines[line_of(text, "layers: list[nn.Module] = [nn.Linear(16, width)]")].label == "model[0][0]"
    diags = await until(lambda: client.diagnostics.get(uri), what="diagnostics on train.py")
    assert diags and all(d.range.start.line in lines for d in diags if d.source == "gradsight")


@pytest.mark.parametrize("style", ["ddp", "compiled"])
async def test_wrapped_model(client: LanguageClient, workspaces: dict[str, Path], style: str):
    uri, text, records = await session(client, workspaces[style])
    lines = by_line(records)
    fc1 = lines[line_of(text, "self.fc1 = nn.Linear(16, 64)")]
    assert fc1.module == "fc1" and fc1.label == "fc1" and fc1.severity == "error"  # the wrapper unwrapped to the user's names
    wrap = "DistributedDataParallel(Net())" if style == "ddp" else "torch.compile(Net()"
    model = lines[line_of(text, wrap)]
    assert model.model and model.health < 100
    value = await hover(client, uri, line_of(text, "self.fc1 = nn.Linear(16, 64)"))
    assert value is not None and "`fc1` (Linear)" in value and "exploding" in value
    diags = await until(lambda: client.diagnostics.get(uri), what="diagnostics on train.py")
    assert any(d.range.start.line == line_of(text, "self.fc1 = nn.Linear(16, 64)") for d in diags)
