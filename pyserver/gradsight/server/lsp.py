"""gradsight's language server: pygls wiring only; every feature is a plain function elsewhere in this package."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import glob
import logging
import os
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument

from .. import __version__
from ..analysis.data import ACTIVATIONS
from ..store import RunStore, StoreError, add_watch
from ..store.reader import quick_state, signature
from . import commands, edits, render, validation
from .render import LineLayers
from .runs import DEFAULT_RUNS_FOLDER, RunView, build_view, runs_in
from .sourcemap import resolve, same_file

log = logging.getLogger("gradsight.server")
SOURCE = "gradsight"
VALIDATE_TOP = 3  # fixes a "Validate fixes" re-runs
SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning, "info": lsp.DiagnosticSeverity.Information}
KINDS_DOC = Path(__file__).resolve().parent.parent / "docs" / "kinds.md"
# the workDoneToken of the workspace/executeCommand request being handled (pygls hands commands their arguments only)
WORK_DONE: contextvars.ContextVar[lsp.ProgressToken | None] = contextvars.ContextVar("gradsight_work_done", default=None)


class Protocol(LanguageServerProtocol):
    @lsp_method(lsp.WORKSPACE_EXECUTE_COMMAND)
    def lsp_workspace__execute_command(self, params: lsp.ExecuteCommandParams) -> Generator[Any, Any, Any]:
        WORK_DONE.set(params.work_done_token)  # copied into the command's task when it starts, just after this
        return (yield from super().lsp_workspace__execute_command(params))


@dataclass
class Options:
    runs_folder: str = DEFAULT_RUNS_FOLDER
    store: str | None = None  # a chosen store: followed, never switched away from
    poll: float = 0.2  # seconds between looks at the store
    inlay_hints: bool = True
    thresholds: dict[str, Any] = field(default_factory=dict)  # overrides of the project's thresholds

    def update(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            return
        raw = raw.get("gradsight", raw)
        if isinstance(raw.get("runsFolder"), str) and raw["runsFolder"]:
            self.runs_folder = raw["runsFolder"]
        if "store" in raw:
            self.store = raw["store"] or None
        if isinstance(raw.get("pollInterval"), (int, float)) and raw["pollInterval"] > 0:
            self.poll = float(raw["pollInterval"])
        if isinstance(raw.get("inlayHints"), bool):
            self.inlay_hints = raw["inlayHints"]
        if isinstance(raw.get("thresholds"), dict):
            self.thresholds = dict(raw["thresholds"])


class GradsightServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("gradsight", __version__, protocol_cls=Protocol)
        self.options = Options()
        self.view: RunView | None = None
        self.sig: tuple[Any, ...] | None = None
        self.known: set[str] = set()
        self.chosen: str | None = None  # by the openRun command
        self.seen_events: set[tuple[str, int]] = set()
        self.doc_cache: dict[str, tuple[Any, list[LineLayers]]] = {}
        self.published: set[str] = set()
        self.follower: asyncio.Task[None] | None = None
        self.build_s = 0.0  # how long the last analysis took
        self.built_at = 0.0
        self.last_records: list[dict[str, Any]] = []
        self.quick_sig: tuple[Any, ...] | None = None
        self.fix_cache: tuple[Any, list[dict[str, Any]]] | None = None
        self.verdicts: dict[str, dict[str, dict[str, Any]]] = {}  # run -> fix id -> what a validation this session ran said
        self.validations: dict[str, asyncio.Task[dict[str, Any]]] = {}  # run -> the validation running for it

    # -- where things are --------------------------------------------------------------
    def root(self) -> str:
        return self.workspace.root_path or os.getcwd()

    def runs_folder(self) -> str:
        folder = os.path.expanduser(self.options.runs_folder)
        return folder if os.path.isabs(folder) else os.path.join(self.root(), folder)

    def target(self) -> str | None:
        """The store to follow: the configured one, else a chosen one, else the newest; a new run takes over."""
        if self.options.store:
            store = os.path.expanduser(self.options.store)
            return store if os.path.isabs(store) else os.path.join(self.root(), store)
        files = {os.path.abspath(p) for p in glob.glob(os.path.join(self.runs_folder(), "*.db"))}
        new = files - self.known
        self.known |= files
        if new:
            self.chosen = None
            return max(new, key=_mtime)
        if self.chosen and os.path.exists(self.chosen):
            return self.chosen
        if self.view is not None and self.view.path in files:
            return self.view.path
        return max(files, key=_mtime) if files else None

    def document(self, uri: str) -> TextDocument | None:
        """An open document, else the file on disk; None for a document that is neither (a request on it answers null)."""
        doc = self.workspace.text_documents.get(unquote(uri))
        if doc is not None:
            return doc
        path = to_fs_path(uri)
        if not path or not os.path.isfile(path):
            return None
        try:
            return TextDocument(uri, source=Path(path).read_text(errors="replace"))
        except OSError:
            return None

    def entries(self, uri: str) -> list[LineLayers]:
        """The layer lines of a document, re-found in its current text."""
        view = self.view
        if view is None or view.data is None:
            return []
        doc = self.document(uri)
        if doc is None:
            return []
        key = (view.path, len(view.data.modules), doc.version, hash(doc.source))
        cached = self.doc_cache.get(uri)
        if cached is not None and cached[0] == key:
            return cached[1]
        path = to_fs_path(uri) or uri
        located = resolve(view.data.modules, path, doc.source)
        if located is None:  # does not parse right now: keep the last good lines
            return cached[1] if cached else []
        by_line: dict[int, dict[str, list[str]]] = {}
        for loc in located:
            if loc.module in view.layers and _is_layer(view, loc.module):
                by_line.setdefault(loc.line, {}).setdefault(loc.group, []).append(loc.module)
        result = []
        for line, groups in sorted(by_line.items()):
            # a container built on the line of its own children (nn.ModuleList([nn.Linear(...) for ...])) is not a layer there
            on_line = [m for g in groups.values() for m in g]
            kept = [tuple(m for m in g if m == render.ROOT or not any(o.startswith(m + ".") for o in on_line)) for g in groups.values()]
            kept = [g for g in kept if g]
            result.append(LineLayers(line, tuple(m for g in kept for m in g), tuple(kept)))
        if uri in self.workspace.text_documents:
            self.doc_cache[uri] = (key, result)
        return result

    def is_script(self, uri: str) -> bool:
        view = self.view
        script = view.data.run.get("script") if view is not None and view.data is not None else None
        return bool(script) and same_file(str(script), to_fs_path(uri) or uri)

    def module_lines(self) -> dict[str, tuple[str, int]]:
        out: dict[str, tuple[str, int]] = {}
        for uri in list(self.workspace.text_documents):
            path = to_fs_path(uri) or uri
            for e in self.entries(uri):
                for m in e.modules:
                    out[m] = (path, e.line)
        return out

    def script_text(self) -> str | None:
        for uri in list(self.workspace.text_documents):
            if self.is_script(uri):
                doc = self.document(uri)
                return doc.source if doc is not None else None
        return None

    def fixes(self) -> list[dict[str, Any]]:
        """The run's fixes placed in the current text (the editor's buffers), best first by what validation said."""
        view = self.view
        if view is None:
            return []
        script, lines = self.script_text(), self.module_lines()
        on_disk = view.data.run.get("script") if view.data is not None and script is None else None
        key = (id(view), view.built, script, _mtime(str(on_disk)) if on_disk else None, tuple(sorted(lines.items())))
        if self.fix_cache is None or self.fix_cache[0] != key:
            self.fix_cache = (key, edits.fixes_for(view, script, lines, self.verdicts.get(view.path)))
        return self.fix_cache[1]

    def placed(self, fixes: list[dict[str, Any]] | None = None, hidden: bool = False) -> list[edits.Placed]:
        """The fixes that have a place in the code, in order; those a re-run showed harmful only with ``hidden``."""
        out = []
        for f in self.fixes() if fixes is None else fixes:
            p = edits.place(f, self.file_lines)
            if p is not None and (hidden or not p.hidden):
                out.append(p)
        return out

    def file_lines(self, path: str) -> list[str]:
        """A file's current lines with their line ends: the open document's, else the file on disk."""
        for uri in list(self.workspace.text_documents):
            if same_file(path, to_fs_path(uri) or uri):
                doc = self.document(uri)
                return list(doc.lines) if doc is not None else []
        try:
            return Path(path).read_text(errors="replace").splitlines(keepends=True)
        except OSError:
            return []

    def workspace_edit(self, fix: edits.Placed) -> lsp.WorkspaceEdit:
        """All of a fix's edits, in the files' current text, as one WorkspaceEdit."""
        changes: dict[str, list[lsp.TextEdit]] = {}
        texts: dict[str, list[str]] = {}
        for c in fix.changes:
            uri = self.uri_of(c.file)
            if uri not in texts:
                texts[uri] = self.file_lines(c.file)
            (sl, sc), (el, ec), text = edits.line_range(c, texts[uri])
            rng = lsp.Range(start=lsp.Position(line=sl, character=sc), end=lsp.Position(line=el, character=ec))
            changes.setdefault(uri, []).append(lsp.TextEdit(range=rng, new_text=text))
        return lsp.WorkspaceEdit(changes=changes)

    def uri_of(self, path: str) -> str:
        for uri in list(self.workspace.text_documents):
            if same_file(path, to_fs_path(uri) or uri):
                return uri
        return from_fs_path(path) or path

    def cause_line(self, uri: str, doc: TextDocument) -> int | None:
        """The 1-based line of ``uri`` where the root cause is (its module's creation line, or the script's optimizer,
        loss or data line), or None."""
        view = self.view
        rc = (view.diagnosis or {}).get("root_cause") if view is not None else None
        if view is None or view.data is None or not rc:
            return None
        return next((p.line for p in render.problems(view, self.entries(uri), doc.source, self.is_script(uri))
                     if p.module == rc["module"] and p.code == rc["kind"]), None)

    def targeting(self, placed: list[edits.Placed], uri: str, lines: set[int]) -> list[edits.Placed]:
        """The fixes whose target (or a line they replace) is on one of ``lines`` (1-based) of ``uri``."""
        path = to_fs_path(uri) or uri
        return [p for p in placed if any(n in lines and same_file(f, path) for f, n in p.lines)]

    # -- validating fixes ---------------------------------------------------------------
    def progress_supported(self) -> bool:
        caps = self.client_capabilities.window if self.client_capabilities else None
        return bool(caps is not None and caps.work_done_progress)

    async def validate(self, run: str, argv: list[str], what: str, token: lsp.ProgressToken | None) -> dict[str, Any]:
        """Run ``gradsight validate`` for ``run`` with work-done progress on ``token`` (the client's, else one this
        server creates when the client allows), then take its verdicts in and show them."""
        progress = self.work_done_progress
        if token is None and self.progress_supported():
            token = f"gradsight-validate-{uuid.uuid4()}"
            try:
                await progress.create_async(token)
            except Exception:  # the client declined: no progress, the validation still runs
                log.info("the client refused a progress token", exc_info=True)
                token = None
        name = os.path.basename(run)
        task = asyncio.current_task()
        if token is not None:
            progress.begin(token, lsp.WorkDoneProgressBegin(title="gradsight: validating fixes", message=f"{what} for {name}",
                                                            percentage=0, cancellable=True))
            cancel = progress.tokens.get(token)
            if cancel is not None and task is not None:  # the user cancelled the progress (window/workDoneProgress/cancel)
                loop = asyncio.get_running_loop()
                cancel.add_done_callback(lambda f: loop.call_soon_threadsafe(task.cancel) if f.cancelled() else None)

        def report(step: validation.Step) -> None:
            if token is not None:
                done = f"{step.done}/{step.total}" if step.total else ""
                pct = step.percentage
                progress.report(token, lsp.WorkDoneProgressReport(message=f"{done} {step.message}".strip(),
                                                                  percentage=None if pct is None else min(99, pct)))

        def end(message: str) -> None:
            if token is not None:
                progress.end(token, lsp.WorkDoneProgressEnd(message=message))

        try:
            result = await validation.run(argv, cwd=self.root(), on_progress=report, on_line=lambda ln: log.info("validate: %s", ln))
        except asyncio.CancelledError:
            end("cancelled")
            raise commands.CommandError(f"the validation of {name}'s fixes was cancelled") from None
        except (validation.ValidateError, OSError) as exc:
            end(f"failed: {exc}")
            raise commands.CommandError(f"gradsight validate {name}: {exc}") from exc
        found = validation.verdicts(result)
        self.verdicts.setdefault(run, {}).update(found)
        end(verdict_summary(found) or "no fix to validate")
        if self.view is not None and self.view.path == run:  # the store now holds the verdicts: analyse it again
            loop = asyncio.get_running_loop()
            view = await loop.run_in_executor(None, functools.partial(build_view, run, overrides=self.options.thresholds))
            self.view, self.sig = view, await loop.run_in_executor(None, signature, run)
            self.built_at = time.monotonic()
        self.fix_cache = None
        self.publish()
        self.refresh_client()
        return {**result, "run": run}

    # -- pushing to the client -------------------------------------------------------
    def publish(self) -> None:
        records: list[dict[str, Any]] = []
        view = self.view
        open_uris = list(self.workspace.text_documents)
        for uri in open_uris:
            self.publish_diagnostics(uri)
            if view is not None:
                records += render.health_records(view, uri, self.entries(uri))
        state = view.state() if view is not None else {"run": None}
        self.last_records = records
        self.protocol.notify("gradsight/health", {"run": state.get("run"), "step": state.get("step"), "state": state, "records": records})

    def publish_state(self, quick: dict[str, Any]) -> None:
        """A new step between analyses: the last records, the run's current step, loss and status."""
        if self.view is None:
            return
        state = {**self.view.state(), **quick, "analysedStep": self.view.last_step}
        self.protocol.notify("gradsight/health", {"run": self.view.path, "step": quick["step"], "state": state, "records": self.last_records})

    def publish_diagnostics(self, uri: str) -> None:
        view = self.view
        diags: list[lsp.Diagnostic] = []
        doc = self.document(uri)
        if view is not None and view.data is not None and doc is not None:
            for p in render.problems(view, self.entries(uri), doc.source, self.is_script(uri)):
                text = doc.lines[p.line - 1] if 0 < p.line <= len(doc.lines) else ""
                start = len(text) - len(text.lstrip())
                rng = lsp.Range(start=lsp.Position(line=p.line - 1, character=start),
                                end=lsp.Position(line=p.line - 1, character=len(text.rstrip("\r\n"))))
                diags.append(lsp.Diagnostic(range=rng, message=p.message, severity=SEVERITY[p.severity], source=SOURCE, code=p.code,
                                            code_description=lsp.CodeDescription(href=KINDS_DOC.as_uri() + "#" + p.code),
                                            data={"module": p.module}))
        if diags or uri in self.published:
            self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diags))
        if diags:
            self.published.add(uri)
        else:
            self.published.discard(uri)

    def announce_anomalies(self) -> None:
        """Notify the client of each new event once: anomalies and breakpoints (``gradsight/anomaly``) and the
        runtime's warnings (``gradsight/warning``)."""
        view = self.view
        if view is None:
            return
        where: dict[str, tuple[str, int]] = {}
        for uri in list(self.workspace.text_documents):
            for e in self.entries(uri):
                for m in e.modules:
                    where[m] = (uri, e.line - 1)
        for ev in view.events():
            if ev.kind not in ("trigger", "breakpoint", "warning") or (view.path, ev.id) in self.seen_events:
                continue
            self.seen_events.add((view.path, ev.id))
            if ev.kind == "warning":  # the runtime about itself or the run's set-up (its cost, a watch it could not parse, ...)
                self.protocol.notify("gradsight/warning", {"run": view.path, "step": ev.step, "name": ev.name, "value": ev.value,
                                                           "message": ev.message})
                continue
            uri, line = where.get(ev.module or "", (None, None))
            self.protocol.notify("gradsight/anomaly", {
                "run": view.path, "step": ev.step, "kind": ev.kind, "trigger": ev.name, "module": ev.module, "condition": ev.condition,
                "value": ev.value, "message": ev.message, "uri": uri, "line": line})

    def refresh_client(self) -> None:
        caps = self.client_capabilities.workspace if self.client_capabilities else None
        if caps is not None and caps.inlay_hint is not None and caps.inlay_hint.refresh_support:
            self.workspace_inlay_hint_refresh(None)
        if caps is not None and caps.code_lens is not None and caps.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    async def follow(self) -> None:
        """Look at the store every ``poll`` seconds; re-analyse and publish when it changed."""
        loop = asyncio.get_running_loop()
        last_scan = 0.0
        target: str | None = None
        while True:
            try:
                now = time.monotonic()
                if target is None or now - last_scan > 0.5 or self.options.store:
                    target, last_scan = self.target(), now
                if target is not None:
                    sig = await loop.run_in_executor(None, signature, target)
                    current = self.view.path if self.view is not None else None
                    if target != current or sig != self.sig:
                        # a long run takes a while to analyse: between analyses (at most every 2x the last one's
                        # time) the client still gets each new step, loss and status from a few indexed reads
                        due = target != current or time.monotonic() - self.built_at >= max(0.0, 2 * self.build_s)
                        if due:
                            t0 = time.monotonic()
                            view = await loop.run_in_executor(None, functools.partial(build_view, target, overrides=self.options.thresholds))
                            self.build_s, self.built_at = time.monotonic() - t0, time.monotonic()
                            self.view, self.sig = view, sig
                            self.publish()
                            self.announce_anomalies()
                            self.refresh_client()
                        elif sig != self.quick_sig:
                            quick = await loop.run_in_executor(None, quick_state, target)
                            if quick is not None:
                                self.quick_sig = sig
                                self.publish_state(quick)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bad store must not end the server
                log.exception("following the run store")
            await asyncio.sleep(self.options.poll)

    def restart_following(self) -> None:
        self.sig = None
        if self.follower is None:
            self.follower = asyncio.get_running_loop().create_task(self.follow())


def verdict_summary(found: dict[str, dict[str, Any]]) -> str:
    """``1 validated, 2 did not help``."""
    counts: dict[str, int] = {}
    for v in found.values():
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    order = [*edits.VERDICTS, *sorted(set(counts) - set(edits.VERDICTS))]
    return ", ".join(f"{counts[k]} {k.replace('_', ' ')}" for k in order if k in counts)


def _mtime(path: str) -> float:
    try:
        return max(os.path.getmtime(p) for p in (path, path + "-wal") if os.path.exists(p))
    except (OSError, ValueError):
        return 0.0


def _is_layer(view: RunView, module: str) -> bool:
    """Lines stand for the model, modules with parameters (the layers, their containers) or activation modules."""
    data = view.data
    if data is None:
        return False
    m = data.modules[data.index[module]]
    return module == render.ROOT or m.n_params > 0 or m.type in ACTIVATIONS or m.type.startswith("Dropout")


server = GradsightServer()


@server.feature(lsp.INITIALIZE)
def on_initialize(ls: GradsightServer, params: lsp.InitializeParams) -> None:
    ls.options.update(params.initialization_options)


@server.feature(lsp.INITIALIZED)
async def on_initialized(ls: GradsightServer, params: lsp.InitializedParams) -> None:
    ls.restart_following()


@server.feature(lsp.SHUTDOWN)
async def on_shutdown(ls: GradsightServer, *args: Any) -> None:
    """No validation goes on behind a server that stops: its re-runs are stopped too."""
    running = [t for t in ls.validations.values() if not t.done()]
    for t in running:
        t.cancel()
    if running:
        await asyncio.wait(running, timeout=validation.STOP_WAIT_S + 2)


@server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
def on_configuration(ls: GradsightServer, params: lsp.DidChangeConfigurationParams) -> None:
    ls.options.update(params.settings)
    ls.sig = None


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: GradsightServer, params: lsp.DidOpenTextDocumentParams) -> None:
    ls.publish()


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: GradsightServer, params: lsp.DidChangeTextDocumentParams) -> None:
    ls.publish()


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: GradsightServer, params: lsp.DidCloseTextDocumentParams) -> None:
    ls.doc_cache.pop(params.text_document.uri, None)
    if params.text_document.uri in ls.published:
        ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))
        ls.published.discard(params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_HOVER)
def hover(ls: GradsightServer, params: lsp.HoverParams) -> lsp.Hover | None:
    view = ls.view
    uri, line = params.text_document.uri, params.position.line
    doc = ls.document(uri)
    if view is None or doc is None:
        return None
    entry = next((e for e in ls.entries(uri) if e.line == line + 1), None)
    text: str | None = None
    if entry is not None:
        text = render.layer_hover(view, entry)
    else:
        source_line = doc.lines[line] if 0 <= line < len(doc.lines) else ""
        if render.loop_kind(source_line) and (ls.is_script(uri) or view.data is None or not view.data.run.get("script")):
            text = render.loop_hover(view)
    here = hover_fixes(ls, uri, doc, line + 1, entry)
    if here:
        details = {f["id"]: f for f in ls.fixes()}
        text = (text + "\n\n" if text else "**gradsight** · fixes for this line\n\n") + "\n".join(render.fix_lines(here, details))
    if not text:
        return None
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text))


def hover_fixes(ls: GradsightServer, uri: str, doc: TextDocument, line: int, entry: LineLayers | None) -> list[edits.Placed]:
    """The fixes a hover on ``line`` (1-based) lists: all of them on the root cause's line, else those that go there."""
    view = ls.view
    if view is None or view.data is None or not (view.diagnosis or {}).get("root_cause"):
        return []
    placed = ls.placed()
    if not placed:
        return []
    if ls.cause_line(uri, doc) == line:
        return placed
    return ls.targeting(placed, uri, {line})


@server.feature(lsp.TEXT_DOCUMENT_INLAY_HINT)
def inlay_hints(ls: GradsightServer, params: lsp.InlayHintParams) -> list[lsp.InlayHint] | None:
    view = ls.view
    doc = ls.document(params.text_document.uri)
    if doc is None:
        return None
    if view is None or not ls.options.inlay_hints:
        return []
    out = []
    for e in ls.entries(params.text_document.uri):
        if not (params.range.start.line <= e.line - 1 <= params.range.end.line) or e.line > len(doc.lines):
            continue
        if e.is_model:
            health = (view.diagnosis or {}).get("health")
            hint = f"model health {health}"
        else:
            layer = render.worst(view, e.layers())
            if layer is None:
                continue
            hint = f"health {layer['health']}"
        end = len(doc.lines[e.line - 1].rstrip("\r\n"))
        out.append(lsp.InlayHint(position=lsp.Position(line=e.line - 1, character=end), label=hint,
                                 padding_left=True, tooltip=render.summary(view, e)))
    return out


@server.feature(lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix]))
def code_actions(ls: GradsightServer, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
    """The light bulb: on the root cause's line (and a flagged layer's, and the training loop's) its fixes; on the line
    a fix goes to (the optimizer's, the data's, ...) that fix. Validated fixes first, harmful ones never."""
    view = ls.view
    uri = params.text_document.uri
    doc = ls.document(uri)
    if doc is None:
        return None
    if view is None or view.data is None:
        return []
    lines = set(range(params.range.start.line + 1, params.range.end.line + 2))
    on_line = {m for e in ls.entries(uri) if e.line in lines for m in e.modules}
    problem_lines = {p.line for p in render.problems(view, ls.entries(uri), doc.source, ls.is_script(uri))}
    loop_line = ls.is_script(uri) and any(render.loop_kind(doc.lines[n - 1]) for n in lines if 0 < n <= len(doc.lines))
    placed = ls.placed()
    targeted = {p.fix_id for p in ls.targeting(placed, uri, lines)}
    chosen: set[str] = set()
    if on_line or lines & problem_lines or loop_line:
        chosen = {p.fix_id for p in placed}
        if on_line and not loop_line:  # a layer line: its own fixes, or all of them where the root cause is
            fixes = {f["id"]: f for f in ls.fixes()}
            own = {i for i in chosen if (fixes.get(i) or {}).get("module") in on_line}
            chosen = own or (chosen if lines & problem_lines else set())
    offered = [p for p in placed if p.fix_id in chosen | targeted]
    ours = [d for d in params.context.diagnostics if d.source == SOURCE]
    return [lsp.CodeAction(title=f"Apply fix: {p.label}", kind=lsp.CodeActionKind.QuickFix, edit=ls.workspace_edit(p),
                           diagnostics=ours or None, is_preferred=i == 0, data={"fix": p.fix_id, "verdict": p.verdict})
            for i, p in enumerate(offered)]


@server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: GradsightServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens] | None:
    """Above the root cause's line: "Apply fix: <the best fix>", "Validate fixes" (``gradsight.validate``), the heatmap."""
    view = ls.view
    uri = params.text_document.uri
    doc = ls.document(uri)
    if doc is None:
        return None
    if view is None or view.data is None:
        return []
    line = ls.cause_line(uri, doc)
    if line is None:
        return []
    rng = lsp.Range(start=lsp.Position(line=line - 1, character=0), end=lsp.Position(line=line - 1, character=0))
    every = ls.placed(hidden=True)
    shown = [p for p in every if not p.hidden]
    lenses = []
    if shown:
        top = shown[0]
        lenses.append(lsp.CodeLens(range=rng, command=lsp.Command(title=f"Apply fix: {top.label}", command="gradsight.applyFix",
                                                                  arguments=[{"id": top.fix_id}])))
    if every:
        running = view.path in ls.validations and not ls.validations[view.path].done()
        said = verdict_summary({p.fix_id: {"verdict": p.verdict} for p in every if p.verdict})
        title = "Validate fixes: running…" if running else "Validate fixes" + (f" again ({said})" if said else "")
        lenses.append(lsp.CodeLens(range=rng, command=lsp.Command(title=title, command="gradsight.validate",
                                                                  arguments=[{"run": view.path, "top": VALIDATE_TOP}])))
    lenses.append(lsp.CodeLens(range=rng, command=lsp.Command(title="Show heatmap", command="gradsight.showHeatmap",
                                                              arguments=[{"run": view.path}])))
    return lenses


# -- commands -----------------------------------------------------------------------------
def _arg(args: tuple[Any, ...]) -> dict[str, Any]:
    if not args:
        return {}
    first = args[0]
    if isinstance(first, dict):
        return first
    if isinstance(first, str):
        return {"path": first}
    raise commands.CommandError(f"expected one object argument, got {type(first).__name__}")


@server.command("gradsight.listRuns")
def list_runs(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    return {"folder": ls.runs_folder(), "current": ls.view.path if ls.view else None,
            "runs": [r.as_dict() for r in runs_in(ls.runs_folder())]}


@server.command("gradsight.openRun")
async def open_run(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    path = _arg(args).get("path")
    if not isinstance(path, str) or not path:
        raise commands.CommandError("openRun needs {'path': <a run store>}")
    path = os.path.abspath(os.path.join(ls.root(), os.path.expanduser(path)))
    try:
        RunStore(path).close()  # not a store at all: say so (a store with no step yet is fine)
    except StoreError as exc:
        raise commands.CommandError(str(exc)) from exc
    view = await asyncio.get_running_loop().run_in_executor(None, functools.partial(build_view, path, overrides=ls.options.thresholds))
    ls.chosen, ls.view, ls.sig = path, view, signature(path)
    ls.known.add(path)
    ls.publish()
    ls.announce_anomalies()
    return view.state()


@server.command("gradsight.state")
def state(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    return ls.view.state() if ls.view is not None else {"run": None, "folder": ls.runs_folder()}


@server.command("gradsight.diagnosis")
def diagnosis(ls: GradsightServer, *args: Any) -> dict[str, Any] | None:
    return ls.view.diagnosis if ls.view is not None else None


@server.command("gradsight.validateCondition")
def validate_condition(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    a = _arg(args)
    condition = a.get("condition")
    if not isinstance(condition, str):
        raise commands.CommandError("validateCondition needs {'condition': str, 'uri'?: str, 'line'?: int (0-based)}")
    uri, line = a.get("uri"), a.get("line")
    modules: list[str] = []
    line_text = ""
    if isinstance(uri, str) and isinstance(line, int):
        modules = [m for e in ls.entries(uri) if e.line == line + 1 for m in e.modules]  # a closed file is read from disk
        lines = ls.file_lines(to_fs_path(uri) or uri)
        line_text = lines[line] if 0 <= line < len(lines) else ""
    all_modules = ls.view.data.names if ls.view is not None and ls.view.data is not None else []
    result = commands.validate(condition, modules_on_line=modules, all_modules=all_modules, line_text=line_text)
    if result["ok"] and result["kind"] == "layer" and a.get("install") and ls.view is not None and ls.view.status == "running":
        try:
            result["watchId"] = add_watch(ls.view.path, result["condition"], module=result["scope"],
                                          file=to_fs_path(uri) if isinstance(uri, str) else None,
                                          line=line + 1 if isinstance(line, int) else None)
            result["run"] = ls.view.path
        except StoreError as exc:
            result["warning"] = f"not installed in the running run: {exc}"
    return result


@server.command("gradsight.renderPicture")
async def render_picture(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    a = _arg(args)
    view = ls.view
    if a.get("run") and (view is None or os.path.abspath(a["run"]) != view.path):
        view = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(build_view, os.path.abspath(a["run"]), overrides=ls.options.thresholds))
    if view is None:
        raise commands.CommandError(f"no run to draw: none open and none in {ls.runs_folder()}")
    return await asyncio.get_running_loop().run_in_executor(None, commands.picture, view, a)


async def _view_for(ls: GradsightServer, a: dict[str, Any]) -> RunView:
    """The run a command asks for (``run``), else the one followed."""
    view = ls.view
    if a.get("run") and (view is None or os.path.abspath(a["run"]) != view.path):
        view = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(build_view, os.path.abspath(a["run"]), overrides=ls.options.thresholds))
    if view is None:
        raise commands.CommandError(f"no run to show: none open and none in {ls.runs_folder()}")
    return view


@server.command("gradsight.panelData")
async def panel_data(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    a = _arg(args)
    view = await _view_for(ls, a)
    return await asyncio.get_running_loop().run_in_executor(None, commands.panel_data, view, a)


@server.command("gradsight.sandbox")
async def sandbox(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    a = _arg(args)
    view = await _view_for(ls, a)
    return await asyncio.get_running_loop().run_in_executor(None, commands.sandbox, view, a)


@server.command("gradsight.writeReport")
async def export_report(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    a = _arg(args)
    path = a.get("path")
    if not isinstance(path, str) or not path:
        raise commands.CommandError("writeReport needs {'path': <file.pdf or file.html>}")
    view = await _view_for(ls, a)
    return await asyncio.get_running_loop().run_in_executor(None, commands.export_report, view, os.path.abspath(path))


@server.command("gradsight.fixes")
def list_fixes(ls: GradsightServer, *args: Any) -> list[dict[str, Any]]:
    """The run's fixes, best first, each with its place in the current text (``place``: null where it has none) and
    what validation said (``validated``); ``hidden`` for those the editor does not offer: a re-run showed them harmful,
    or they are in the code already (``applied``)."""
    fixes = ls.fixes()
    placed = {p.fix_id: p for p in ls.placed(fixes, hidden=True)}
    out = []
    for f in fixes:
        p = placed.get(f["id"]) if isinstance(f.get("id"), str) else None
        place = None if p is None else {
            "uri": ls.uri_of(p.file), "line": p.line - 1, "label": p.label,
            "edits": [{"uri": ls.uri_of(c.file), "start": c.start - 1, "end": c.end - 1, "text": c.text} for c in p.changes]}
        first = p.changes[0] if p is not None else None
        insertion = None if p is None or first is None else {"uri": ls.uri_of(first.file), "line": first.start - 1, "text": first.text}
        out.append({**f, "validated": edits.verdict_of(f), "hidden": bool(p and p.hidden), "applied": bool(p and p.applied),
                    "place": place, "insertion": insertion})
    return out


@server.command("gradsight.applyFix")
async def apply_fix(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    fix_id = _arg(args).get("id")
    fix = next((p for p in ls.placed(hidden=True) if p.fix_id == fix_id), None)
    if fix is None:
        raise commands.CommandError(f"no fix {fix_id!r} with a place in the code for the current run")
    edit = ls.workspace_edit(fix)
    result = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(edit=edit, label=f"gradsight: {fix.title}"))
    return {"applied": bool(result.applied), "id": fix.fix_id, "uri": ls.uri_of(fix.file), "line": fix.line - 1,
            "files": sorted((edit.changes or {}).keys()), "validation": list(fix.validation), "verdict": fix.verdict,
            "effect": fix.effect, "reason": result.failure_reason}


@server.command("gradsight.validate")
async def validate_fixes(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    """``{run?, top? (3), fix?, steps?}``: re-run the run's script with each of its best fixes (``gradsight validate``)
    in the background, with work-done progress; answers ``{"fixes": [{id, verdict, summary, effect}], "run", ...}``
    and shows the verdicts (validated fixes first). A second call for a run being validated waits for that one."""
    a = _arg(args)
    token = WORK_DONE.get()
    run = a.get("run") or (ls.view.path if ls.view is not None else None)
    if not isinstance(run, str) or not run:
        raise commands.CommandError(f"no run to validate: none open and none in {ls.runs_folder()}")
    run = os.path.abspath(os.path.join(ls.root(), os.path.expanduser(run)))
    if not os.path.isfile(run):
        raise commands.CommandError(f"{run}: no such run store")
    top = a.get("top", VALIDATE_TOP)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise commands.CommandError(f"top must be a whole number of fixes (1 or more), got {top!r}")
    fix = a.get("fix")
    if fix is not None and (not isinstance(fix, str) or not fix):
        raise commands.CommandError(f"fix must be a fix's id, got {fix!r}")
    steps = a.get("steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise commands.CommandError(f"steps must be a whole number of steps, got {steps!r}")
    running = ls.validations.get(run)
    if running is not None and not running.done():
        return await asyncio.shield(running)
    argv = validation.command(run, top=top, fix=fix, steps=steps)
    what = f"fix {fix}" if fix else f"the top {top} fix{'es' if top != 1 else ''}"
    task = asyncio.get_running_loop().create_task(ls.validate(run, argv, what, token))
    ls.validations[run] = task
    task.add_done_callback(lambda t: ls.validations.pop(run) if ls.validations.get(run) is t else None)
    ls.refresh_client()  # the CodeLens says it runs
    return await task


@server.command("gradsight.cancelValidate")
def cancel_validate(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    """``{run?}``: stop the validation of that run (of every run when none is named) and the re-runs it started."""
    run = _arg(args).get("run")
    want = os.path.abspath(os.path.join(ls.root(), os.path.expanduser(run))) if isinstance(run, str) and run else None
    cancelled = [r for r, t in list(ls.validations.items()) if (want is None or r == want) and not t.done() and t.cancel()]
    return {"cancelled": cancelled}
