"""gradsight's language server: pygls wiring only; every feature is a plain function elsewhere in this package."""

from __future__ import annotations

import asyncio
import functools
import glob
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument

from .. import __version__
from ..analysis.data import ACTIVATIONS
from ..store import RunStore, StoreError, add_watch
from ..store.reader import quick_state, signature
from . import commands, edits, render
from .render import LineLayers
from .runs import DEFAULT_RUNS_FOLDER, RunView, build_view, runs_in
from .sourcemap import resolve, same_file

log = logging.getLogger("gradsight.server")
SOURCE = "gradsight"
SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning, "info": lsp.DiagnosticSeverity.Information}
KINDS_DOC = Path(__file__).resolve().parent.parent / "docs" / "kinds.md"


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
        super().__init__("gradsight", __version__)
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
        return edits.fixes_for(self.view, self.script_text(), self.module_lines()) if self.view is not None else []

    def file_lines(self, path: str) -> list[str]:
        for uri in list(self.workspace.text_documents):
            if same_file(path, to_fs_path(uri) or uri):
                doc = self.document(uri)
                return list(doc.lines) if doc is not None else []
        try:
            return Path(path).read_text(errors="replace").splitlines(keepends=True)
        except OSError:
            return []

    def insertion_edit(self, ins: edits.Insertion) -> lsp.WorkspaceEdit:
        uri = self.uri_of(ins.file)
        pos = lsp.Position(line=ins.line - 1, character=0)
        return lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(range=lsp.Range(start=pos, end=pos), new_text=ins.text)]})

    def uri_of(self, path: str) -> str:
        for uri in list(self.workspace.text_documents):
            if same_file(path, to_fs_path(uri) or uri):
                return uri
        return from_fs_path(path) or path

    def insertions(self, fixes: list[dict[str, Any]]) -> list[edits.Insertion]:
        out = []
        for f in fixes:
            where = f.get("where") or {}
            ins = edits.insertion(f, [ln.rstrip("\n") for ln in self.file_lines(where["file"])] if where.get("file") else None)
            if ins is not None:
                out.append(ins)
        return out

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
    if not text:
        return None
    return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text))


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
    if not on_line and not (lines & problem_lines) and not loop_line:
        return []
    fixes = ls.fixes()
    if on_line and not loop_line:  # a layer line: its own fixes, or all of them where the root cause is
        fixes = [f for f in fixes if f.get("module") in on_line] or (fixes if lines & problem_lines else [])
    ours = [d for d in params.context.diagnostics if d.source == SOURCE]
    out = []
    for i, ins in enumerate(ls.insertions(fixes)):
        out.append(lsp.CodeAction(title=f"Insert fix: {ins.title}", kind=lsp.CodeActionKind.QuickFix, edit=ls.insertion_edit(ins),
                                  diagnostics=ours or None, is_preferred=i == 0, data={"fix": ins.fix_id}))
    return out


@server.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: GradsightServer, params: lsp.CodeLensParams) -> list[lsp.CodeLens] | None:
    view = ls.view
    uri = params.text_document.uri
    doc = ls.document(uri)
    if doc is None:
        return None
    if view is None or view.data is None or not (view.diagnosis or {}).get("root_cause"):
        return []
    rc = view.diagnosis["root_cause"] if view.diagnosis else None
    line = next((p.line for p in render.problems(view, ls.entries(uri), doc.source, ls.is_script(uri))
                 if rc and p.module == rc["module"] and p.code == rc["kind"]), None)
    if line is None:
        return []
    fix = next(iter(ls.insertions(ls.fixes())), None)
    rng = lsp.Range(start=lsp.Position(line=line - 1, character=0), end=lsp.Position(line=line - 1, character=0))
    lenses = []
    if fix is not None:
        lenses.append(lsp.CodeLens(range=rng, command=lsp.Command(title=f"Apply fix: {fix.title}", command="gradsight.applyFix",
                                                                  arguments=[{"id": fix.fix_id}])))
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
    fixes = ls.fixes()
    placed = {i.fix_id: i for i in ls.insertions(fixes)}
    return [{**f, "insertion": None if f["id"] not in placed else {"uri": ls.uri_of(placed[f["id"]].file),
                                                                    "line": placed[f["id"]].line - 1, "text": placed[f["id"]].text}}
            for f in fixes]


@server.command("gradsight.applyFix")
async def apply_fix(ls: GradsightServer, *args: Any) -> dict[str, Any]:
    fix_id = _arg(args).get("id")
    ins = next((i for i in ls.insertions(ls.fixes()) if i.fix_id == fix_id), None)
    if ins is None:
        raise commands.CommandError(f"no fix {fix_id!r} with a place in the code for the current run")
    result = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(edit=ls.insertion_edit(ins), label=f"gradsight: {ins.title}"))
    return {"applied": bool(result.applied), "id": ins.fix_id, "uri": ls.uri_of(ins.file), "line": ins.line - 1,
            "validation": list(ins.validation), "reason": result.failure_reason}
