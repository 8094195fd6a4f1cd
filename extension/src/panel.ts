// The heatmap panel: pictures rendered by the server, a step range, a module filter, the anomaly,
// modules that reveal their source line, and "Insert fix" buttons. Strict CSP with a nonce; survives reloads.
import { randomBytes } from 'crypto';
import * as vscode from 'vscode';
import { Server } from './server';

export const VIEW_TYPE = 'gradsight.heatmap';

interface PanelState {
    run?: string;
    kind?: string;
    steps?: [number, number];
    modules?: string;
}

interface Picture {
    mime: string;
    data: string;
    run: string;
    steps: [number, number] | null;
    anomaly: number | null;
    modules: { module: string; type: string; file: string | null; line: number | null }[];
}

interface Fix { id: string; title: string; explanation?: string; insertion: unknown }

type Message =
    | { type: 'render'; state: PanelState }
    | { type: 'reveal'; file: string; line: number }
    | { type: 'applyFix'; id: string };

export class HeatmapPanel {
    private static current: HeatmapPanel | undefined;

    static show(context: vscode.ExtensionContext, server: Server, state: PanelState): void {
        if (HeatmapPanel.current) {
            HeatmapPanel.current.panel.reveal(vscode.ViewColumn.Beside);
            void HeatmapPanel.current.render({ ...HeatmapPanel.current.state, ...state });
            return;
        }
        const panel = vscode.window.createWebviewPanel(VIEW_TYPE, 'gradsight: gradients', vscode.ViewColumn.Beside, options());
        HeatmapPanel.current = new HeatmapPanel(panel, context, server, state);
    }

    static serializer(context: vscode.ExtensionContext, server: Server): vscode.WebviewPanelSerializer {
        return {
            async deserializeWebviewPanel(panel: vscode.WebviewPanel, state: PanelState | undefined) {
                panel.webview.options = options();
                HeatmapPanel.current = new HeatmapPanel(panel, context, server, state ?? {});
            },
        };
    }

    private constructor(private readonly panel: vscode.WebviewPanel, context: vscode.ExtensionContext,
                        private readonly server: Server, private state: PanelState) {
        panel.webview.html = html(randomBytes(16).toString('base64'));
        panel.onDidDispose(() => { HeatmapPanel.current = undefined; }, null, context.subscriptions);
        panel.webview.onDidReceiveMessage((m: Message) => void this.handle(m), null, context.subscriptions);
        void this.render(state);
    }

    private async handle(m: Message): Promise<void> {
        if (m.type === 'render') {
            await this.render(m.state);
        } else if (m.type === 'reveal' && typeof m.file === 'string' && Number.isInteger(m.line)) {
            const doc = await vscode.workspace.openTextDocument(vscode.Uri.file(m.file));
            const pos = new vscode.Position(Math.max(0, m.line - 1), 0);
            await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.One, selection: new vscode.Range(pos, pos) });
        } else if (m.type === 'applyFix' && typeof m.id === 'string') {
            const r = await this.server.command<{ applied: boolean; reason?: string }>('gradsight.applyFix', { id: m.id });
            if (r && !r.applied) {
                void vscode.window.showErrorMessage(`gradsight: the fix was not applied${r.reason ? `: ${r.reason}` : ''}`);
            }
        }
    }

    private async render(state: PanelState): Promise<void> {
        this.state = state;
        const post = (msg: unknown) => void this.panel.webview.postMessage(msg);
        try {
            const pic = await this.server.command<Picture>('gradsight.renderPicture', {
                kind: state.kind ?? 'heatmap', run: state.run, steps: state.steps, modules: state.modules, format: 'png',
            });
            const fixes = (await this.server.command<Fix[]>('gradsight.fixes')) ?? [];
            if (!pic) {
                post({ type: 'error', message: 'The gradsight language server is not running.' });
                return;
            }
            this.state = { ...state, run: pic.run };
            post({ type: 'picture', state: this.state, picture: pic, fixes: fixes.filter((f) => f.insertion).map((f) => ({ id: f.id, title: f.title })) });
        } catch (e) {
            post({ type: 'error', message: e instanceof Error ? e.message : String(e) });
        }
    }
}

function options(): vscode.WebviewPanelOptions & vscode.WebviewOptions {
    return { enableScripts: true, retainContextWhenHidden: false, localResourceRoots: [] };
}

function html(nonce: string): string {
    return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'nonce-${nonce}'; script-src 'nonce-${nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>gradsight</title>
<style nonce="${nonce}">
  body { color: var(--vscode-foreground); background: var(--vscode-editor-background); font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); margin: 0; padding: 8px 12px; }
  header { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin-bottom: 8px; }
  select, input, button { color: var(--vscode-input-foreground); background: var(--vscode-input-background); border: 1px solid var(--vscode-input-border, transparent); padding: 2px 6px; }
  button { color: var(--vscode-button-foreground); background: var(--vscode-button-background); cursor: pointer; }
  button:hover { background: var(--vscode-button-hoverBackground); }
  .layout { display: flex; gap: 12px; }
  main { flex: 1; min-width: 0; }
  main img { max-width: 100%; background: white; }
  aside { width: 260px; flex-shrink: 0; }
  aside ul { list-style: none; padding: 0; margin: 0 0 12px 0; max-height: 50vh; overflow: auto; }
  aside li { padding: 1px 4px; cursor: pointer; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  aside li:hover { background: var(--vscode-list-hoverBackground); }
  .anomaly { color: var(--vscode-editorError-foreground); font-weight: bold; }
  .error { color: var(--vscode-errorForeground); }
  .fix { display: block; width: 100%; text-align: left; margin-bottom: 4px; }
</style>
</head>
<body>
<header>
  <select id="kind" aria-label="picture">
    <option value="heatmap">Gradient heatmap</option>
    <option value="gradient_flow">Gradient flow</option>
    <option value="loss_curve">Loss curve</option>
  </select>
  <label>steps <input id="from" type="range" min="0" max="0" value="0"> <input id="to" type="range" min="0" max="0" value="0"></label>
  <span id="range"></span>
  <input id="filter" type="text" placeholder="filter modules (glob or part of a name)" size="28">
  <span id="anomaly" class="anomaly"></span>
</header>
<div class="layout">
  <main><p id="message">Rendering...</p><img id="picture" alt="gradient picture"></main>
  <aside><h4>Layers</h4><ul id="modules"></ul><h4>Fixes</h4><div id="fixes"></div></aside>
</div>
<script nonce="${nonce}">
(function () {
  const vscode = acquireVsCodeApi();
  let state = vscode.getState() || {};
  const $ = (id) => document.getElementById(id);
  let timer;
  function request() {
    const from = Number($('from').value), to = Number($('to').value);
    state = { run: state.run, kind: $('kind').value, modules: $('filter').value || undefined,
              steps: Number($('to').max) > 0 ? [Math.min(from, to), Math.max(from, to)] : undefined };
    vscode.setState(state);
    $('message').textContent = 'Rendering...';
    vscode.postMessage({ type: 'render', state });
  }
  function later() { clearTimeout(timer); timer = setTimeout(request, 250); }
  $('kind').addEventListener('change', request);
  $('from').addEventListener('input', () => { $('range').textContent = $('from').value + '-' + $('to').value; later(); });
  $('to').addEventListener('input', () => { $('range').textContent = $('from').value + '-' + $('to').value; later(); });
  $('filter').addEventListener('input', later);
  window.addEventListener('message', (event) => {
    const m = event.data;
    if (m.type === 'error') { $('message').textContent = m.message; $('message').className = 'error'; return; }
    if (m.type !== 'picture') { return; }
    const p = m.picture;
    state = m.state; vscode.setState(state);
    $('message').textContent = ''; $('message').className = '';
    $('picture').src = 'data:' + (p.mime === 'image/svg+xml' ? 'image/svg+xml' : 'image/png') + ';base64,' + p.data;
    $('kind').value = state.kind || 'heatmap';
    if (p.steps) {
      for (const id of ['from', 'to']) { $(id).min = String(p.steps[0]); $(id).max = String(p.steps[1]); }
      const chosen = state.steps || p.steps;
      $('from').value = String(chosen[0]); $('to').value = String(chosen[1]);
      $('range').textContent = chosen[0] + '-' + chosen[1];
    }
    $('filter').value = state.modules || '';
    $('anomaly').textContent = p.anomaly === null || p.anomaly === undefined ? '' : 'anomaly at step ' + p.anomaly;
    const list = $('modules'); list.replaceChildren();
    for (const mod of p.modules) {
      const li = document.createElement('li');
      li.textContent = mod.module + ' (' + mod.type + ')';
      li.title = mod.file ? mod.file + ':' + mod.line : 'no source line';
      if (mod.file && mod.line) { li.addEventListener('click', () => vscode.postMessage({ type: 'reveal', file: mod.file, line: mod.line })); }
      list.appendChild(li);
    }
    const fixes = $('fixes'); fixes.replaceChildren();
    for (const f of m.fixes) {
      const b = document.createElement('button');
      b.className = 'fix'; b.textContent = 'Insert fix: ' + f.title;
      b.addEventListener('click', () => vscode.postMessage({ type: 'applyFix', id: f.id }));
      fixes.appendChild(b);
    }
  });
  if (state.kind) { $('kind').value = state.kind; }
}());
</script>
</body>
</html>`;
}
