// The gradsight panel: a webview that draws the run's gradients and the sandbox of its captured tensors from the
// language server's data (gradsight.panelData, gradsight.sandbox). It follows the newest run, as the decorations do.
// Strict Content-Security-Policy: one bundled script with a nonce, the stylesheet inline with the same nonce,
// no eval, nothing remote; images only as data: URIs. Survives a reload (the webview keeps its own state).
import { randomBytes } from 'crypto';
import { readFileSync } from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { Fix, FromWebview, GradientsArgs, isVerdict, isView, PanelData, SandboxData, ToWebview, Validated, View } from './pure/protocol';
import { Server } from './server';

export const VIEW_TYPE = 'gradsight.heatmap';
const REFRESH_MS = 1500; // at most one redraw of a running run this often

export interface ShowOptions {
    view?: View;
    module?: string;
}

/** One fix of the server's gradsight.fixes: where it goes (null: no place in the code) and what validation said. */
interface FixEntry { id: string; title: string; effect?: string; place?: unknown; insertion?: unknown; hidden?: boolean; applied?: boolean; validated?: Validated | null }

function panelFix(f: FixEntry): Fix {
    const v = f.validated && isVerdict(f.validated.verdict) ? f.validated : null;
    return { id: f.id, title: f.title, validated: v, hidden: Boolean(f.hidden), applied: Boolean(f.applied), effect: typeof f.effect === 'string' ? f.effect : undefined };
}

export class GradsightPanel {
    private static current: GradsightPanel | undefined;
    private lastArgs: GradientsArgs = {};
    private shownRun: string | undefined;
    private seen: { run: string | null; step: number | null } = { run: null, step: null };
    private timer: ReturnType<typeof setTimeout> | undefined;
    private pending: ShowOptions | undefined;
    private static validating = false;

    static show(context: vscode.ExtensionContext, server: Server, opts: ShowOptions = {}): void {
        const view = opts.view ?? 'gradients';
        if (GradsightPanel.current) {
            GradsightPanel.current.panel.reveal(undefined, false);
            GradsightPanel.current.post({ type: 'show', view, module: opts.module });
            return;
        }
        const panel = vscode.window.createWebviewPanel(VIEW_TYPE, 'gradsight', vscode.ViewColumn.Beside, options(context));
        GradsightPanel.current = new GradsightPanel(panel, context, server, { view, module: opts.module });
    }

    static serializer(context: vscode.ExtensionContext, server: Server): vscode.WebviewPanelSerializer {
        return {
            async deserializeWebviewPanel(panel: vscode.WebviewPanel) {
                panel.webview.options = options(context);
                GradsightPanel.current = new GradsightPanel(panel, context, server, undefined);
            },
        };
    }

    /** Each gradsight/health notification: a new run is drawn at once, new steps of the shown one at most every REFRESH_MS. */
    static onHealth(run: string | null, step: number | null): void {
        GradsightPanel.current?.follow(run, step);
    }

    /** A validation of the fixes started or ended (from the panel's button, the CodeLens or the command palette). */
    static onValidating(running: boolean): void {
        GradsightPanel.validating = running;
        const p = GradsightPanel.current;
        p?.post({ type: 'validating', running });
        if (p && !running) {
            void p.gradients(p.lastArgs); // the fixes with their verdicts
        }
    }

    static async exportReport(server: Server): Promise<void> {
        await exportPdf(server, (m) => GradsightPanel.current?.post(m));
    }

    private constructor(private readonly panel: vscode.WebviewPanel, context: vscode.ExtensionContext,
                        private readonly server: Server, first: ShowOptions | undefined) {
        this.pending = first && first.view !== 'gradients' ? first : undefined;
        panel.webview.html = html(panel.webview, context, randomBytes(16).toString('base64'), first?.view ?? 'gradients');
        panel.onDidDispose(() => {
            clearTimeout(this.timer);
            GradsightPanel.current = undefined;
        }, null, context.subscriptions);
        panel.webview.onDidReceiveMessage((m: FromWebview) => void this.handle(m), null, context.subscriptions);
    }

    private post(m: ToWebview): void {
        void this.panel.webview.postMessage(m);
    }

    private follow(run: string | null, step: number | null): void {
        const changed = run !== this.seen.run || step !== this.seen.step;
        this.seen = { run, step };
        if (!changed || !run || this.shownRun === undefined) {
            return;
        }
        if (run !== this.shownRun) {
            this.lastArgs = { maxColumns: this.lastArgs.maxColumns };
            void this.gradients(this.lastArgs);
            return;
        }
        this.timer ??= setTimeout(() => {
            this.timer = undefined;
            void this.gradients(this.lastArgs);
        }, REFRESH_MS);
    }

    private async gradients(args: GradientsArgs): Promise<void> {
        this.lastArgs = args;
        try {
            const data = await this.server.command<PanelData>('gradsight.panelData', args);
            if (!data) {
                this.post({ type: 'error', view: 'gradients', message: 'The gradsight language server is not running (see gradsight: Show Output).' });
                return;
            }
            const fixes = ((await this.server.command<FixEntry[]>('gradsight.fixes')) ?? []).filter((f) => f.place ?? f.insertion)
                .map(panelFix);
            this.shownRun = data.run.path;
            this.panel.title = `gradsight: ${data.run.name}`;
            this.post({ type: 'gradients', data, fixes });
            this.post({ type: 'validating', running: GradsightPanel.validating });
        } catch (e) {
            this.post({ type: 'error', view: 'gradients', message: messageOf(e) });
        }
    }

    private async handle(m: FromWebview): Promise<void> {
        switch (m.type) {
            case 'ready':
                if (this.pending?.view) {
                    this.post({ type: 'show', view: this.pending.view, module: this.pending.module });
                    this.pending = undefined;
                }
                return;
            case 'gradients':
                await this.gradients(m.args ?? {});
                return;
            case 'sandbox': {
                const view = m.args?.view;
                if (!isView(view) || (view as View) === 'gradients') {
                    return;
                }
                try {
                    const data = await this.server.command<SandboxData>('gradsight.sandbox', m.args);
                    if (data) {
                        this.post({ type: 'sandbox', data });
                    }
                } catch (e) {
                    this.post({ type: 'error', view, message: messageOf(e) });
                }
                return;
            }
            case 'reveal':
                if (typeof m.file === 'string' && Number.isInteger(m.line) && m.line > 0) {
                    const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(m.file));
                    const pos = new vscode.Position(m.line - 1, 0);
                    const editor = await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.One, selection: new vscode.Range(pos, pos) });
                    editor.revealRange(new vscode.Range(pos, pos), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
                }
                return;
            case 'applyFix': {
                const r = await this.server.command<{ applied: boolean; reason?: string }>('gradsight.applyFix', { id: m.id });
                if (r && !r.applied) {
                    void vscode.window.showErrorMessage(`gradsight: the fix was not applied${r.reason ? `: ${r.reason}` : ''}`);
                }
                return;
            }
            case 'validateFixes':
                await vscode.commands.executeCommand('gradsight.validateFixes', this.shownRun ? { run: this.shownRun } : {});
                return;
            case 'savePng': {
                const match = /^data:image\/png;base64,([A-Za-z0-9+/=]+)$/.exec(m.dataUrl ?? '');
                if (!match) {
                    return;
                }
                const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
                const target = await vscode.window.showSaveDialog({
                    defaultUri: folder ? vscode.Uri.joinPath(folder, path.basename(m.name || 'gradsight.png')) : undefined,
                    filters: { 'PNG image': ['png'] }, title: 'gradsight: save this view as PNG',
                });
                if (target) {
                    await vscode.workspace.fs.writeFile(target, Buffer.from(match[1], 'base64'));
                    this.post({ type: 'saved', what: 'PNG', path: target.fsPath });
                }
                return;
            }
            case 'exportPdf':
                await exportPdf(this.server, (msg) => this.post(msg));
                return;
        }
    }
}

async function exportPdf(server: Server, post: (m: ToWebview) => void): Promise<void> {
    const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
    const target = await vscode.window.showSaveDialog({
        defaultUri: folder ? vscode.Uri.joinPath(folder, 'gradsight-report.pdf') : undefined,
        filters: { 'PDF report': ['pdf'], 'HTML report': ['html'] }, title: 'gradsight: export the report',
    });
    if (!target) {
        return;
    }
    try {
        const r = await server.command<{ path: string }>('gradsight.writeReport', { path: target.fsPath });
        if (r) {
            post({ type: 'saved', what: 'report', path: r.path });
            void vscode.window.showInformationMessage(`gradsight: report written to ${r.path}`);
        }
    } catch (e) {
        void vscode.window.showErrorMessage(`gradsight: ${messageOf(e)}`);
    }
}

function messageOf(e: unknown): string {
    return e instanceof Error ? e.message : String(e);
}

function options(context: vscode.ExtensionContext): vscode.WebviewPanelOptions & vscode.WebviewOptions {
    return {
        enableScripts: true, retainContextWhenHidden: true,
        localResourceRoots: [vscode.Uri.file(context.asAbsolutePath(path.join('extension', 'dist')))],
    };
}

let css: string | undefined;

function html(webview: vscode.Webview, context: vscode.ExtensionContext, nonce: string, view: View): string {
    const dist = context.asAbsolutePath(path.join('extension', 'dist'));
    css ??= readFileSync(path.join(dist, 'panel.css'), 'utf8');
    const script = webview.asWebviewUri(vscode.Uri.file(path.join(dist, 'webview.js')));
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>gradsight</title>
<style nonce="${nonce}">${css}</style>
</head>
<body data-view="${view}">
<script nonce="${nonce}" src="${script.toString()}"></script>
</body>
</html>`;
}
