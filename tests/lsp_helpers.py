"""Helpers for driving the real language server (pytest-lsp) against real traced runs."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pytest_lsp import ClientServerConfig, LanguageClient

from .conftest import ROOT, run_gradsight

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "gradsight", "serve"],
                            server_env={"PYTHONPATH": str(ROOT / "pyserver")})


def workspace_with_run(where: Path, script: Path, *args: str, extra: tuple[Path, ...] = ()) -> Path:
    """A folder holding ``script`` as train.py (plus ``extra`` files), traced once into .gradsight/runs/."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, where / "train.py")
    for f in extra:
        shutil.copy(f, where / f.name)
    r = run_gradsight("trace", "train.py", *args, cwd=where)
    assert r.returncode in (0, 3), r.stderr
    assert list((where / ".gradsight" / "runs").glob("*.db")), r.stderr
    return where


async def start(client: LanguageClient, root: Path, options: dict[str, Any] | None = None) -> None:
    caps = lsp.ClientCapabilities(
        text_document=lsp.TextDocumentClientCapabilities(
            hover=lsp.HoverClientCapabilities(content_format=[lsp.MarkupKind.Markdown]),
            code_action=lsp.CodeActionClientCapabilities(),
            inlay_hint=lsp.InlayHintClientCapabilities(),
            code_lens=lsp.CodeLensClientCapabilities(),
            publish_diagnostics=lsp.PublishDiagnosticsClientCapabilities()),
        workspace=lsp.WorkspaceClientCapabilities(apply_edit=True),
        window=lsp.WindowClientCapabilities(work_done_progress=True))
    await client.initialize_session(lsp.InitializeParams(capabilities=caps, root_uri=root.as_uri(),
                                                         initialization_options={"pollInterval": 0.1, **(options or {})}))


async def begin(client: LanguageClient, ws: Path, options: dict[str, Any] | None = None) -> None:
    """Start a session on ``ws``, collecting the server's notifications on the client (``health``, ``anomalies``)."""
    client.health = collect(client, "gradsight/health")  # type: ignore[attr-defined]
    client.anomalies = collect(client, "gradsight/anomaly")  # type: ignore[attr-defined]
    client.ws = ws  # type: ignore[attr-defined]
    await start(client, ws, options)


def trace_in_background(ws: Path, output: str, *args: str) -> subprocess.Popen[str]:
    """``gradsight trace train.py ARGS --output OUTPUT`` in ``ws``, running while the test goes on."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    return subprocess.Popen([sys.executable, "-m", "gradsight", "trace", "train.py", *args, "--output", output],
                            cwd=ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def open_doc(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=version, text=path.read_text() if text is None else text)))
    return uri


async def until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def line_of(text: str, needle: str) -> int:
    """0-based line of the first line containing ``needle``."""
    return next(i for i, ln in enumerate(text.splitlines()) if needle in ln)


def collect(client: LanguageClient, method: str) -> list[Any]:
    got: list[Any] = []
    client.feature(method)(lambda params: got.append(params))
    return got


async def command(client: LanguageClient, name: str, *args: Any) -> Any:
    return await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command=name, arguments=list(args)))


def apply_edit(text: str, edit: lsp.WorkspaceEdit, uri: str) -> str:
    """Apply a WorkspaceEdit's insertions/replacements for ``uri`` to ``text`` (as an editor would)."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))

    def off(p: lsp.Position) -> int:
        return offsets[min(p.line, len(lines))] + p.character

    changes = (edit.changes or {}).get(uri, [])
    for e in sorted(changes, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: off(e.range.start)] + e.new_text + text[off(e.range.end):]
    return text
