// gradsight's VS Code extension: a thin client. All analysis lives in the Python language server.
import * as path from 'path';
import * as vscode from 'vscode';
import { TensorBreakpoints } from './breakpoints';
import { Decorations } from './decorations';
import { registerDebug } from './debug';
import { validateFixes, ValidateArgs } from './fixes';
import { GradsightPanel, VIEW_TYPE } from './panel';
import { isView } from './pure/protocol';
import { HealthNotification } from './pure/health';
import { Server } from './server';
import { needsRestart } from './settings';
import { Status } from './status';

interface Anomaly { run: string; step: number | null; kind: string; trigger: string; module: string | null; message: string; uri: string | null; line: number | null }
interface RuntimeWarning { run: string; step: number | null; name: string; value: number | null; message: string }
interface RunEntry { path: string; name: string; status: string | null; steps: number | null; script: string | null }

let server: Server | undefined;
const announced = new Set<string>();
const warned = new Set<string>();

export async function activate(context: vscode.ExtensionContext): Promise<{ server: Server }> {
    const output = vscode.window.createOutputChannel('gradsight');
    server = new Server(output);
    const srv = server;
    const decorations = new Decorations(context.asAbsolutePath(path.join('extension', 'media')));
    const status = new Status();
    const breakpoints = new TensorBreakpoints(srv, output);
    context.subscriptions.push(output, srv, decorations, status, breakpoints);

    srv.onClient((client) => {
        client.onNotification('gradsight/health', (n: HealthNotification) => {
            decorations.update(n);
            status.show(n.state ?? { run: n.run });
            GradsightPanel.onHealth(n.run, n.step); // the panel follows the newest run too
        });
        client.onNotification('gradsight/anomaly', (a: Anomaly) => {
            output.appendLine(`anomaly: ${a.trigger} at step ${a.step}${a.module ? ` in ${a.module}` : ''}: ${a.message}`);
            // one toast per run, for what a trigger caught (a breakpoint that fired has already paused the run)
            if (a.kind === 'trigger' && !announced.has(a.run)) {
                announced.add(a.run);
                void announce(context, srv, a);
            }
        });
        client.onNotification('gradsight/warning', (w: RuntimeWarning) => {
            output.appendLine(`warning: ${w.name}${w.step !== null ? ` at step ${w.step}` : ''}: ${w.message}`);
            if (w.name === 'overhead' && !warned.has(w.run)) { // once per run: gradsight slowed it
                warned.add(w.run);
                void vscode.window.showWarningMessage(w.message);
            }
        });
    });

    context.subscriptions.push(
        vscode.commands.registerCommand('gradsight.addTensorBreakpoint', (arg?: { lineNumber?: number; uri?: vscode.Uri }) => breakpoints.add(arg)),
        vscode.commands.registerCommand('gradsight.showHeatmap', (arg?: { module?: string }) =>
            GradsightPanel.show(context, srv, { view: 'gradients', module: arg?.module })),
        vscode.commands.registerCommand('gradsight.showSandbox', (arg?: { view?: string; module?: string }) =>
            GradsightPanel.show(context, srv, { view: isView(arg?.view) ? arg?.view : 'attention', module: arg?.module })),
        vscode.commands.registerCommand('gradsight.showAttention', () => GradsightPanel.show(context, srv, { view: 'attention' })),
        vscode.commands.registerCommand('gradsight.showHistograms', () => GradsightPanel.show(context, srv, { view: 'histogram' })),
        vscode.commands.registerCommand('gradsight.showProjection', () => GradsightPanel.show(context, srv, { view: 'projection' })),
        vscode.commands.registerCommand('gradsight.showSamples', () => GradsightPanel.show(context, srv, { view: 'samples' })),
        vscode.commands.registerCommand('gradsight.exportReport', () => GradsightPanel.exportReport(srv)),
        vscode.commands.registerCommand('gradsight.validateFixes', (arg?: ValidateArgs) => validateFixes(srv, arg, {
            started: () => GradsightPanel.onValidating(true),
            ended: () => GradsightPanel.onValidating(false),
        })),
        vscode.commands.registerCommand('gradsight.chooseRun', () => openRun(srv)),
        vscode.commands.registerCommand('gradsight.restartServer', () => srv.restart()),
        vscode.commands.registerCommand('gradsight.showOutput', () => output.show()),
        vscode.window.registerWebviewPanelSerializer(VIEW_TYPE, GradsightPanel.serializer(context, srv)),
        vscode.workspace.onDidChangeConfiguration((e) => {
            if (needsRestart(e)) {
                void srv.restart();
            } else if (e.affectsConfiguration('gradsight')) {
                void srv.configure();
                decorations.render();
            }
        }),
    );
    registerDebug(context, breakpoints, output);
    void srv.ready();
    return { server: srv };
}

async function announce(context: vscode.ExtensionContext, srv: Server, a: Anomaly): Promise<void> {
    const where = a.module ? ` in ${a.module}` : '';
    const pick = await vscode.window.showWarningMessage(`gradsight: ${a.trigger} at step ${a.step}${where}: ${a.message}`,
        'Show Heatmap', ...(a.uri && a.line !== null ? ['Go to Layer'] : []));
    if (pick === 'Show Heatmap') {
        GradsightPanel.show(context, srv, { view: 'gradients' });
    } else if (pick === 'Go to Layer' && a.uri && a.line !== null) {
        const pos = new vscode.Position(a.line, 0);
        await vscode.window.showTextDocument(vscode.Uri.parse(a.uri), { selection: new vscode.Range(pos, pos) });
    }
}

async function openRun(srv: Server): Promise<void> {
    const listing = await srv.command<{ folder: string; current: string | null; runs: RunEntry[] }>('gradsight.listRuns');
    if (!listing) {
        return;
    }
    if (!listing.runs.length) {
        void vscode.window.showInformationMessage(`gradsight: no runs in ${listing.folder} yet. Trace a script: F5 with a gradsight configuration, or gradsight trace train.py.`);
        return;
    }
    const pick = await vscode.window.showQuickPick(listing.runs.map((r) => ({
        label: r.name, description: `${r.status ?? ''} · ${r.steps ?? 0} steps${r.path === listing.current ? ' · shown' : ''}`,
        detail: r.script ?? undefined, path: r.path,
    })), { title: 'gradsight: open a run' });
    if (pick) {
        await srv.command('gradsight.openRun', { path: pick.path });
    }
}

export async function deactivate(): Promise<void> {
    await server?.stop();
    server = undefined;
}
