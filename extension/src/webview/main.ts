// The gradsight panel (webview side): the gradients of a run (heatmap, flow, loss) and the sandbox of its captured
// tensors (attention, activations, projection, samples), drawn from the language server's data with uPlot.
// It runs under the panel's strict Content-Security-Policy: this one bundled script (nonce), no eval, no remote code.
import {
    AttentionData, Fix, fixNote, FromWebview, Gradients, HistogramData, isView, PanelData, ProjectionData, RunInfo, runTitle,
    SandboxArgs, SandboxData, SandboxView, SamplesData, TensorEntry, ToWebview, View,
} from '../pure/protocol';
import { color, columnOf, extent, fmt, NONFINITE_COLOR, rgb, Scale, transform, unit } from '../pure/scale';
import { indexSplits, labelWidth, Plot, PlotSpec } from './plot';

interface VsCodeApi { postMessage(m: FromWebview): void; getState(): unknown; setState(s: unknown): void }
declare function acquireVsCodeApi(): VsCodeApi;
const vscode = acquireVsCodeApi();

interface State {
    view: View;
    scale: Scale;
    filter: string;
    step?: number;
    zoom?: [number, number];
    sandbox: Partial<Record<SandboxView, SandboxArgs>>;
}

const saved = (vscode.getState() ?? {}) as Partial<State>;
const state: State = {
    view: isView(saved.view) ? saved.view : 'gradients', scale: saved.scale === 'linear' ? 'linear' : 'log',
    filter: typeof saved.filter === 'string' ? saved.filter : '', sandbox: saved.sandbox ?? {},
};
let panel: PanelData | undefined;
let fixes: Fix[] = [];
let validating = false;
const sandboxes: Partial<Record<SandboxView, SandboxData>> = {};
const plots = new Map<string, Plot>();

const LABELS: Record<View, string> = {
    gradients: 'Gradients', attention: 'Attention', histogram: 'Activations', projection: 'Projection', samples: 'Samples',
};

// -- the page ---------------------------------------------------------------------------------------------------

function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Partial<Record<string, string>> = {}, ...kids: (Node | string)[]): HTMLElementTagNameMap[K] {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
        if (v === undefined) {
            continue;
        }
        if (k === 'class') {
            el.className = v;
        } else if (k === 'text') {
            el.textContent = v;
        } else {
            el.setAttribute(k, v);
        }
    }
    el.append(...kids);
    return el;
}

const $ = <T extends HTMLElement = HTMLElement>(id: string): T => document.getElementById(id) as T;

function page(): void {
    const tabs = h('nav', { id: 'tabs', role: 'tablist' });
    for (const v of Object.keys(LABELS) as View[]) {
        const b = h('button', { id: `tab-${v}`, role: 'tab', class: 'tab', text: LABELS[v], 'data-view': v });
        b.addEventListener('click', () => show(v));
        tabs.append(b);
    }
    const png = h('button', { id: 'export-png', class: 'small', text: 'PNG', title: 'Export this view as a PNG image' });
    png.addEventListener('click', exportPng);
    const pdf = h('button', { id: 'export-pdf', class: 'small', text: 'PDF report', title: 'Export the whole run as the PDF report (every figure and the diagnosis)' });
    pdf.addEventListener('click', () => vscode.postMessage({ type: 'exportPdf' }));
    document.body.append(
        h('header', {}, h('div', { id: 'run', class: 'run', text: 'gradsight: waiting for a run...' }), tabs, h('span', { class: 'grow' }),
            h('span', { class: 'hint', text: 'export' }), png, pdf),
        gradientsSection(), attentionSection(), histogramSection(), projectionSection(), samplesSection(),
    );
}

function message(view: View, text: string, error = false): void {
    const el = $(`msg-${view}`);
    el.textContent = text;
    el.className = error ? 'msg error' : 'msg';
}

function select(id: string, label: string, onChange: (v: string) => void): HTMLLabelElement {
    const s = h('select', { id });
    s.addEventListener('change', () => onChange(s.value));
    return h('label', {}, `${label} `, s);
}

function fill(id: string, options: [string, string][], value: string | undefined): void {
    const s = $<HTMLSelectElement>(id);
    s.replaceChildren(...options.map(([v, t]) => h('option', { value: v, text: t })));
    if (value !== undefined && options.some(([v]) => v === value)) {
        s.value = value;
    }
}

function gradientsSection(): HTMLElement {
    const scale = select('scale', 'colour', (v) => { state.scale = v === 'linear' ? 'linear' : 'log'; persist(); drawGradients(); });
    const filter = h('input', { id: 'filter', type: 'search', placeholder: 'filter layers (glob or part of a name)', size: '28' });
    let timer: ReturnType<typeof setTimeout> | undefined;
    filter.addEventListener('input', () => {
        clearTimeout(timer);
        timer = setTimeout(() => { state.filter = filter.value; persist(); requestGradients(); }, 300);
    });
    const reset = h('button', { id: 'reset', text: 'Reset zoom' });
    reset.addEventListener('click', () => resetZoom());
    return h('section', { id: 'view-gradients', class: 'view' },
        h('div', { class: 'toolbar' }, scale, filter, reset, h('span', { id: 'zoomed', class: 'hint' }), h('span', { class: 'grow' }),
            h('span', { id: 'colorbar', class: 'colorbar' })),
        h('p', { id: 'msg-gradients', class: 'msg', text: 'Loading...' }),
        h('div', { id: 'heatmap', class: 'chart' }),
        h('div', { class: 'pair' },
            h('div', {}, h('h3', { id: 'flow-title', text: 'Gradient flow' }), h('div', { id: 'flow', class: 'chart' })),
            h('div', {}, h('h3', { text: 'Loss' }), h('div', { id: 'loss', class: 'chart' }))),
        h('div', { id: 'fixes', class: 'fixes' }));
}

function attentionSection(): HTMLElement {
    return h('section', { id: 'view-attention', class: 'view' },
        h('div', { class: 'toolbar' },
            select('attn-tensor', 'layer', (v) => sandbox('attention', { tensor: Number(v), head: 0 })),
            select('attn-head', 'head', (v) => sandbox('attention', { head: Number(v) })),
            select('attn-sample', 'sample', (v) => sandbox('attention', { sample: Number(v) })),
            h('span', { id: 'attn-info', class: 'hint' })),
        h('p', { id: 'msg-attention', class: 'msg' }),
        h('div', { class: 'pair wide-left' },
            h('div', {}, h('h3', { id: 'attn-title', text: 'Attention' }), h('div', { id: 'attn-map', class: 'chart' })),
            h('div', {}, h('h3', { text: 'Entropy per head (share of uniform)' }), h('div', { id: 'attn-entropy', class: 'chart' }),
                h('p', { id: 'attn-note', class: 'hint' }))));
}

function histogramSection(): HTMLElement {
    return h('section', { id: 'view-histogram', class: 'view' },
        h('div', { class: 'toolbar' }, select('hist-tensor', 'tensor', (v) => sandbox('histogram', { tensor: Number(v) })),
            h('span', { id: 'hist-info', class: 'hint' })),
        h('p', { id: 'msg-histogram', class: 'msg' }),
        h('div', { id: 'hist', class: 'chart' }),
        h('table', { id: 'hist-stats', class: 'stats' }));
}

function projectionSection(): HTMLElement {
    return h('section', { id: 'view-projection', class: 'view' },
        h('div', { class: 'toolbar' },
            select('proj-tensor', 'tensor', (v) => sandbox('projection', { tensor: Number(v) })),
            select('proj-method', 'method', (v) => sandbox('projection', { method: v })),
            select('proj-color', 'colour by', (v) => sandbox('projection', { color: v })),
            h('span', { id: 'proj-scale', class: 'colorbar' })),
        h('p', { id: 'proj-info', class: 'hint' }),
        h('p', { id: 'msg-projection', class: 'msg' }),
        h('div', { id: 'proj', class: 'chart' }));
}

function samplesSection(): HTMLElement {
    return h('section', { id: 'view-samples', class: 'view' },
        h('div', { class: 'toolbar' }, h('span', { id: 'samples-info', class: 'hint' })),
        h('p', { id: 'msg-samples', class: 'msg' }),
        h('div', { id: 'samples', class: 'chart' }));
}

function persist(): void {
    vscode.setState(state);
}

function show(view: View): void {
    state.view = view;
    persist();
    for (const b of document.querySelectorAll<HTMLButtonElement>('#tabs .tab')) {
        b.classList.toggle('active', b.dataset.view === view);
        b.setAttribute('aria-selected', String(b.dataset.view === view));
    }
    for (const s of document.querySelectorAll<HTMLElement>('section.view')) {
        s.hidden = s.id !== `view-${view}`;
    }
    if (view === 'gradients') {
        if (!panel) {
            requestGradients();
        } else {
            drawGradients();
        }
    } else {
        const data = sandboxes[view];
        if (!data || (panel && data.run.path !== panel.run.path)) {
            sandbox(view, {});
        } else {
            drawSandbox(data);
        }
    }
}

// -- requests -----------------------------------------------------------------------------------------------------

function requestGradients(extra: { step?: number } = {}): void {
    // a zoom into bucketed columns asks the server for the range's own columns (and keeps asking for it)
    const steps = state.zoom && panel && (panel.gradients.bucketed || partial(panel.gradients)) ? state.zoom : undefined;
    vscode.postMessage({ type: 'gradients', args: { steps, modules: state.filter || undefined, step: extra.step ?? state.step, maxColumns: columnsWanted() } });
}

function columnsWanted(): number {
    return Math.max(100, Math.min(1200, Math.floor((document.body.clientWidth || 800) / 2)));
}

function sandbox(view: SandboxView, change: Partial<SandboxArgs>): void {
    const args: SandboxArgs = { ...(state.sandbox[view] ?? {}), ...change, view };
    state.sandbox[view] = args;
    persist();
    message(view, 'Loading...');
    vscode.postMessage({ type: 'sandbox', args });
}

// -- gradients ----------------------------------------------------------------------------------------------------

function drawGradients(): void {
    if (!panel) {
        return;
    }
    const g = panel.gradients;
    message('gradients', g.rows.length ? '' : 'No layer to draw.');
    $<HTMLInputElement>('filter').value = state.filter;
    fill('scale', [['log', 'log10'], ['linear', 'linear']], state.scale);
    heatmap(g);
    flow(g);
    loss(g);
    drawFixes();
}

function plotAt(id: string, spec: PlotSpec): Plot {
    const old = plots.get(id);
    old?.destroy();
    const p = new Plot($(id), spec);
    plots.set(id, p);
    return p;
}

function heatmap(g: Gradients): void {
    const host = $('heatmap');
    const rows = g.rows;
    const n = g.steps.length;
    const labels = rows.map((r) => r.label);
    const height = Math.round(Math.max(220, Math.min(window.innerHeight * 0.55, rows.length * 20 + 70)));
    const range = extent(g.values, state.scale);
    const bad = new Set(g.nonfinite.map(([r, c]) => r * n + c));
    colorbar(range);
    const xmin = g.steps[0] - 0.5;
    const xmax = g.until[n - 1] + 0.5;
    const spec: PlotSpec = {
        height,
        x: { min: xmin, max: xmax, label: 'step', integer: true, values: (v) => String(Math.round(v)) },
        y: {
            min: -0.5, max: rows.length - 0.5, reverse: true, label: '', splits: indexSplits(rows.length, height - 40),
            values: (v) => labels[Math.round(v)] ?? '', size: labelWidth(labels, Math.max(80, host.clientWidth * 0.35)),
        },
        draw: (ctx, px, py) => {
            const [lo, hi] = [px(xmin), px(xmax)];
            for (let c = 0; c < n; c++) {
                const x0 = px(g.steps[c] - 0.5);
                const x1 = px(g.until[c] + 0.5);
                if (x1 < Math.min(lo, hi) - 1 || x0 > Math.max(lo, hi) + 1) {
                    continue;
                }
                for (let r = 0; r < rows.length; r++) {
                    const v = g.values[r][c];
                    let fillStyle: string | null = null;
                    if (bad.has(r * n + c)) {
                        fillStyle = NONFINITE_COLOR;
                    } else {
                        const t = transform(v, state.scale);
                        fillStyle = t === null ? (v === 0 ? '#000' : null) : color(unit(t, range));
                    }
                    if (fillStyle) {
                        const y0 = py(r - 0.5);
                        const y1 = py(r + 0.5);
                        ctx.fillStyle = fillStyle;
                        ctx.fillRect(Math.floor(x0), Math.floor(Math.min(y0, y1)), Math.max(1, Math.ceil(x1 - x0)), Math.ceil(Math.abs(y1 - y0)));
                    }
                }
            }
            marker(ctx, px, py, state.step ?? null, 'rgba(255,255,255,0.8)', [2, 3], -0.5, rows.length - 0.5);
            marker(ctx, px, py, g.anomaly, '#00e5ff', [6, 4], -0.5, rows.length - 0.5);
        },
        hover: (x, y) => {
            const r = Math.round(y);
            const c = columnOf(Math.round(x), g.steps, g.until);
            if (r < 0 || r >= rows.length || c < 0) {
                return null;
            }
            const v = bad.has(r * n + c) ? Number.POSITIVE_INFINITY : g.values[r][c];
            const span = g.until[c] !== g.steps[c] ? `steps ${g.steps[c]}-${g.until[c]}` : `step ${g.steps[c]}`;
            const what = g.until[c] !== g.steps[c] ? 'largest grad norm' : 'grad norm';
            const health = rows[r].health !== null ? ` · health ${rows[r].health}` : '';
            return `${rows[r].label} (${rows[r].type}) · ${span} · ${what} ${v === Number.POSITIVE_INFINITY ? 'NaN/Inf' : fmt(v)}${health}`;
        },
        click: (x, y) => {
            const r = Math.round(y);
            const c = columnOf(Math.round(x), g.steps, g.until);
            if (r < 0 || r >= rows.length || c < 0) {
                return;
            }
            selectStep(g.steps[c]);
            const row = rows[r];
            if (row.file && row.line) {
                vscode.postMessage({ type: 'reveal', file: row.file, line: row.line, module: row.module, step: g.steps[c] });
            }
        },
        zoom: (min, max) => zoomTo(Math.ceil(min), Math.floor(max)),
        reset: () => resetZoom(),
        syncKey: 'steps',
    };
    const p = plotAt('heatmap', spec);
    if (state.zoom && !g.bucketed) {
        p.setX(state.zoom[0] - 0.5, state.zoom[1] + 0.5);
    }
    $('zoomed').textContent = state.zoom ? `steps ${state.zoom[0]}-${state.zoom[1]} · double-click to reset` : 'drag across steps to zoom · click a cell to open its layer';
}

function marker(ctx: CanvasRenderingContext2D, px: (x: number) => number, py: (y: number) => number, x: number | null,
    stroke: string, dash: number[], y0: number, y1: number): void {
    if (x === null || x === undefined) {
        return;
    }
    ctx.save();
    ctx.strokeStyle = stroke;
    ctx.lineWidth = 1.5 * (window.devicePixelRatio || 1);
    ctx.setLineDash(dash);
    ctx.beginPath();
    ctx.moveTo(px(x), py(y0));
    ctx.lineTo(px(x), py(y1));
    ctx.stroke();
    ctx.restore();
}

function colorbar(range: [number, number]): void {
    const el = $('colorbar');
    const c = h('canvas', { width: '120', height: '10' });
    const ctx = c.getContext('2d');
    if (ctx) {
        for (let i = 0; i < 120; i++) {
            ctx.fillStyle = color(i / 119);
            ctx.fillRect(i, 0, 1, 10);
        }
    }
    const f = (t: number) => (state.scale === 'log' ? fmt(10 ** t) : fmt(t));
    const nan = h('span', { class: 'swatch', title: 'NaN/Inf' });
    el.replaceChildren(`${f(range[0])} `, c, ` ${f(range[1])} `, nan, ' NaN/Inf');
}

function zoomTo(a: number, b: number): boolean {
    if (!panel || b < a) {
        return false;
    }
    state.zoom = [a, b];
    persist();
    plots.get('loss')?.setX(a - 0.5, b + 0.5);
    if (panel.gradients.bucketed) {
        requestGradients(); // finer columns for the range
        return true;
    }
    $('zoomed').textContent = `steps ${a}-${b} · double-click to reset`;
    return true;
}

/** The data shown covers only part of the run (it came from a request for a step range). */
function partial(g: Gradients): boolean {
    return g.steps.length > 0 && (g.steps[0] !== g.range[0] || g.until[g.until.length - 1] !== g.range[1]);
}

function resetZoom(): void {
    state.zoom = undefined;
    persist();
    if (panel && partial(panel.gradients)) {
        requestGradients(); // the whole run again
    } else if (panel) {
        drawGradients();
    }
}

function selectStep(step: number): void {
    state.step = step;
    persist();
    if (!panel) {
        return;
    }
    const g = panel.gradients;
    if (!g.bucketed) {
        const c = columnOf(step, g.steps, g.until);
        g.flow = { step: g.steps[c], values: g.values.map((r) => r[c]) };
        flow(g);
        plots.get('heatmap')?.u.redraw(false, false);
        plots.get('loss')?.u.redraw(false, false);
    } else {
        requestGradients({ step });
    }
}

function healthColor(health: number | null): string {
    if (health === null) {
        return '#4c72b0';
    }
    return health < 50 ? '#e5484d' : health < 80 ? '#f5a524' : '#3b82f6';
}

function flow(g: Gradients): void {
    $('flow-title').textContent = `Gradient flow at step ${g.flow.step} (input → output)`;
    const vals = g.flow.values;
    const pos = vals.filter((v): v is number => v !== null && v > 0);
    const lo = pos.length ? Math.min(...pos) / 3 : 1e-6;
    const hi = pos.length ? Math.max(...pos) * 3 : 1;
    const labels = g.rows.map((r) => r.label);
    const height = Math.round(Math.max(200, Math.min(320, window.innerHeight * 0.3)));
    plotAt('flow', {
        height, grid: true,
        x: { min: -0.5, max: labels.length - 0.5, splits: indexSplits(labels.length, ($('flow').clientWidth || 400) / 1.2, 18),
            values: (v) => labels[Math.round(v)] ?? '', rotate: labels.length > 4 ? -40 : 0, size: labels.length > 4 ? labelWidth(labels, 110) * 0.7 + 10 : 30 },
        y: { min: lo, max: hi, log: true, label: 'gradient norm' },
        draw: (ctx, px, py) => {
            const w = Math.max(2, (px(1) - px(0)) * 0.7);
            vals.forEach((v, i) => {
                const bad = v === null;
                ctx.fillStyle = bad ? NONFINITE_COLOR : healthColor(g.rows[i].health);
                const top = bad ? py(hi) : py(Math.max(lo, v as number));
                ctx.fillRect(px(i) - w / 2, top, w, py(lo) - top);
            });
        },
        hover: (x) => {
            const i = Math.round(x);
            if (i < 0 || i >= labels.length) {
                return null;
            }
            return `${labels[i]} · grad norm ${vals[i] === null ? 'NaN/Inf' : fmt(vals[i])} at step ${g.flow.step}`;
        },
        click: (x) => {
            const row = g.rows[Math.round(x)];
            if (row?.file && row.line) {
                vscode.postMessage({ type: 'reveal', file: row.file, line: row.line, module: row.module });
            }
        },
        zoom: () => false,
    });
}

function lineSpec(steps: number[], values: (number | null)[], height: number, label: string, xr: [number, number], anomaly: number | null,
    stroke = '#e0e0e0'): PlotSpec {
    const fin = values.filter((v): v is number => v !== null);
    const positive = fin.length > 0 && fin.every((v) => v > 0);
    const lo = fin.length ? Math.min(...fin) : 0;
    const hi = fin.length ? Math.max(...fin) : 1;
    const log = positive && hi / Math.max(lo, 1e-300) > 20;
    const pad = (hi - lo) * 0.05 || 1;
    const bad = steps.filter((_s, i) => values[i] === null);
    return {
        height, grid: true, syncKey: 'steps',
        x: { min: xr[0], max: xr[1], label: 'step', integer: true, values: (v) => String(Math.round(v)) },
        y: log ? { min: lo / 1.5, max: hi * 1.5, log: true, label } : { min: lo - pad, max: hi + pad, label },
        draw: (ctx, px, py, u) => {
            ctx.strokeStyle = getComputedStyle(document.body).getPropertyValue('--vscode-charts-foreground').trim() || stroke;
            ctx.lineWidth = 1.25 * (window.devicePixelRatio || 1);
            ctx.beginPath();
            let open = false;
            steps.forEach((s, i) => {
                const v = values[i];
                if (v === null) {
                    open = false;
                    return;
                }
                const x = px(s);
                const y = py(v);
                if (open) {
                    ctx.lineTo(x, y);
                } else {
                    ctx.moveTo(x, y);
                    open = true;
                }
            });
            ctx.stroke();
            ctx.fillStyle = NONFINITE_COLOR;
            for (const s of bad) {
                ctx.fillRect(px(s) - 2, u.bbox.top, 4, 8);
            }
            const ymin = log ? lo / 1.5 : lo - pad;
            const ymax = log ? hi * 1.5 : hi + pad;
            marker(ctx, px, py, state.step ?? null, 'rgba(255,255,255,0.8)', [2, 3], ymin, ymax);
            marker(ctx, px, py, anomaly, '#00e5ff', [6, 4], ymin, ymax);
        },
        hover: (x) => {
            if (!steps.length) {
                return null;
            }
            const i = columnOf(Math.round(x), steps, steps);
            return `step ${steps[i]} · ${label} ${values[i] === null ? 'NaN/Inf' : fmt(values[i])}`;
        },
        click: (x) => {
            if (steps.length) {
                selectStep(steps[columnOf(Math.round(x), steps, steps)]);
            }
        },
        zoom: (a, b) => {
            zoomTo(Math.ceil(a), Math.floor(b));
            plots.get('heatmap')?.setX(Math.ceil(a) - 0.5, Math.floor(b) + 0.5);
            return true;
        },
        reset: () => resetZoom(),
    };
}

function loss(g: Gradients): void {
    const height = Math.round(Math.max(200, Math.min(320, window.innerHeight * 0.3)));
    const xr: [number, number] = [g.steps[0] - 0.5, g.until[g.until.length - 1] + 0.5];
    const p = plotAt('loss', lineSpec(g.loss.steps, g.loss.values, height, 'loss', xr, g.anomaly));
    if (state.zoom && !g.bucketed) {
        p.setX(state.zoom[0] - 0.5, state.zoom[1] + 0.5);
    }
}

function drawFixes(): void {
    const el = $('fixes');
    el.replaceChildren();
    if (!fixes.length) {
        return;
    }
    const validate = h('button', {
        id: 'validate-fixes', class: 'small', text: validating ? 'Validating fixes...' : 'Validate fixes',
        title: 'Re-run the script with each of the best fixes (gradsight validate) and mark the ones that remove the fault',
    });
    validate.disabled = validating;
    validate.addEventListener('click', () => {
        validating = true;
        drawFixes();
        vscode.postMessage({ type: 'validateFixes' });
    });
    el.append(h('div', { class: 'toolbar' }, h('h3', { text: 'Fixes' }), validate));
    // validated first, then those not validated yet, then those that did not help; harmful ones are listed, not offered
    for (const f of fixes) {
        const verdict = f.validated?.verdict ?? 'unvalidated';
        const row = h('div', { class: `fix-row ${verdict}${f.applied ? ' applied' : ''}`, 'data-fix': f.id, 'data-verdict': verdict });
        if (f.hidden) {
            row.append(h('span', { class: 'fix-title', text: f.title }));
        } else {
            const b = h('button', { class: 'fix', text: `Apply fix: ${f.title}${verdict === 'validated' ? ' (validated)' : ''}` });
            b.addEventListener('click', () => vscode.postMessage({ type: 'applyFix', id: f.id }));
            row.append(b);
        }
        row.append(h('span', { class: 'fix-note', text: fixNote(f) }));
        el.append(row);
    }
}

// -- the sandbox --------------------------------------------------------------------------------------------------

/** ` (anomaly)`, ` (anomaly+1)`: where a captured step stands to the anomaly. */
function relative(step: number, anomaly: number | null): string {
    if (anomaly === null) {
        return '';
    }
    return step === anomaly ? ' (anomaly)' : ` (anomaly${step > anomaly ? '+' : ''}${step - anomaly})`;
}

function tensorOptions(tensors: TensorEntry[], keep: (t: TensorEntry) => boolean, anomaly: number | null): [string, string][] {
    return tensors.filter(keep).map((t) => [String(t.id), `${t.label} · ${t.role} · step ${t.step}${relative(t.step, anomaly)} · [${t.shape.join('×')}]`]);
}

function drawSandbox(d: SandboxData): void {
    if (d.view === 'attention') {
        attention(d.data, d.tensors, d.run);
    } else if (d.view === 'histogram') {
        histogram(d.data, d.tensors, d.run);
    } else if (d.view === 'projection') {
        projection(d.data, d.tensors, d.run);
    } else {
        samples(d.data);
    }
}

function attention(a: AttentionData, tensors: TensorEntry[], run: RunInfo): void {
    message('attention', a.nonfinite ? `${a.nonfinite} NaN/Inf probabilities in this map (drawn red)` : '');
    fill('attn-tensor', tensorOptions(tensors, (t) => t.attention, run.anomaly?.step ?? null), String(a.id));
    const [b, heads, t] = a.shape;
    fill('attn-head', Array.from({ length: heads }, (_x, i) => [String(i), `${i}${a.collapsed.includes(i) ? ' (collapsed)' : ''}`]), String(a.head));
    fill('attn-sample', Array.from({ length: b }, (_x, i) => [String(i), String(i)]), String(a.sample));
    $('attn-title').textContent = `${a.module} · step ${a.step}${relative(a.step, run.anomaly?.step ?? null)} · head ${a.head}, sample ${a.sample}`;
    $('attn-info').textContent = `${heads} heads · ${t} tokens · ${a.role === 'attention' ? 'attention probabilities' : 'softmax output'}`;
    const tokens = a.tokens;
    const name = (i: number) => (tokens ? `${i}:${tokens[i]}` : String(i));
    let peak = 0;
    for (const row of a.map) {
        for (const v of row) {
            if (v !== null && v > peak) {
                peak = v;
            }
        }
    }
    const width = $('attn-map').clientWidth || 400;
    const height = Math.round(Math.max(240, Math.min(560, width * 0.85)));
    plotAt('attn-map', {
        height,
        x: { min: -0.5, max: t - 0.5, label: 'key', splits: indexSplits(t, width - 60, 22), values: (v) => name(Math.round(v)), rotate: tokens ? -50 : 0,
            size: tokens ? 40 : 24 },
        y: { min: -0.5, max: t - 0.5, reverse: true, label: 'query', splits: indexSplits(t, height - 40), values: (v) => name(Math.round(v)), size: 44 },
        draw: (ctx, px, py) => {
            for (let q = 0; q < t; q++) {
                for (let k = 0; k < t; k++) {
                    const v = a.map[q][k];
                    ctx.fillStyle = v === null ? NONFINITE_COLOR : color(peak > 0 ? v / peak : 0, 'viridis');
                    const x0 = px(k - 0.5);
                    const y0 = py(q - 0.5);
                    ctx.fillRect(Math.floor(x0), Math.floor(Math.min(y0, py(q + 0.5))), Math.ceil(px(k + 0.5) - x0), Math.ceil(Math.abs(py(q + 0.5) - y0)));
                }
            }
        },
        hover: (x, y) => {
            const k = Math.round(x);
            const q = Math.round(y);
            if (q < 0 || q >= t || k < 0 || k >= t) {
                return null;
            }
            return `query ${name(q)} → key ${name(k)} · p ${fmt(a.map[q][k])}`;
        },
        zoom: () => true,
    });
    const ent = a.entropy;
    plotAt('attn-entropy', {
        height: Math.round(Math.max(200, Math.min(320, height * 0.6))), grid: true,
        x: { min: -0.5, max: heads - 0.5, label: 'head', splits: indexSplits(heads, 300, 20), values: (v) => String(Math.round(v)) },
        y: { min: 0, max: 1.05, label: 'entropy / log T' },
        draw: (ctx, px, py) => {
            const w = Math.max(4, (px(1) - px(0)) * 0.6);
            ent.forEach((v, i) => {
                const collapsed = a.collapsed.includes(i);
                ctx.fillStyle = collapsed ? '#e5484d' : i === a.head ? '#f5a524' : '#3b82f6';
                const top = py(v ?? 0);
                ctx.fillRect(px(i) - w / 2, top, w, py(0) - top);
                const mine = a.entropySample[i];
                if (mine !== null) {
                    ctx.fillStyle = '#ffffff';
                    ctx.fillRect(px(i) - w / 2, py(mine) - 1, w, 2);
                }
            });
            ctx.save();
            ctx.strokeStyle = '#e5484d';
            ctx.setLineDash([4, 4]);
            ctx.beginPath();
            ctx.moveTo(px(-0.5), py(a.collapsedBelow));
            ctx.lineTo(px(heads - 0.5), py(a.collapsedBelow));
            ctx.stroke();
            ctx.restore();
        },
        hover: (x) => {
            const i = Math.round(x);
            if (i < 0 || i >= heads) {
                return null;
            }
            return `head ${i} · entropy ${fmt(ent[i])} of uniform over the batch, ${fmt(a.entropySample[i])} for sample ${a.sample}`
                + (a.collapsed.includes(i) ? ' · collapsed' : '');
        },
        click: (x) => {
            const i = Math.round(x);
            if (i >= 0 && i < heads) {
                sandbox('attention', { head: i });
            }
        },
        zoom: () => false,
    });
    $('attn-note').textContent = a.collapsed.length
        ? `collapsed: head ${a.collapsed.join(', ')} (entropy below ${a.collapsedBelow} of uniform: nearly all attention on one token)`
        : `no head below ${a.collapsedBelow} of uniform entropy · white marks: sample ${a.sample}`;
}

function histogram(d: HistogramData, tensors: TensorEntry[], run: RunInfo): void {
    message('histogram', d.stats.nonfinite ? `${d.stats.nonfinite} NaN/Inf values (not in the bins)` : '');
    fill('hist-tensor', tensorOptions(tensors, (t) => t.role !== 'input' || t.dtype.startsWith('float'), run.anomaly?.step ?? null), String(d.id));
    const anomaly = run.anomaly?.step ?? null;
    const here = `step ${d.step}${relative(d.step, anomaly)}`;
    $('hist-info').textContent = d.compare
        ? `${d.module} ${d.role}: ${here} (orange) beside step ${d.compare.step} (blue outline)`
        : `${d.module} ${d.role}: ${here}; no other step of this ${d.role} was captured to compare with`;
    const edges = d.edges.map((e) => e ?? 0);
    const counts = d.counts;
    const other = d.compare?.counts ?? [];
    const top = Math.max(1, ...counts, ...other);
    plotAt('hist', {
        height: Math.round(Math.max(240, Math.min(420, window.innerHeight * 0.5))), grid: true,
        x: { min: edges[0], max: edges[edges.length - 1], label: 'value' },
        y: { min: 0.8, max: top * 1.5, log: true, label: 'count' },
        draw: (ctx, px, py) => {
            counts.forEach((c, i) => {
                if (c > 0) {
                    ctx.fillStyle = 'rgba(245,165,36,0.85)';
                    const y = py(c);
                    ctx.fillRect(px(edges[i]), y, Math.max(1, px(edges[i + 1]) - px(edges[i]) - 1), py(0.8) - y);
                }
            });
            ctx.strokeStyle = '#3b82f6';
            ctx.lineWidth = 1.5 * (window.devicePixelRatio || 1);
            other.forEach((c, i) => {
                if (c > 0) {
                    ctx.strokeRect(px(edges[i]), py(c), px(edges[i + 1]) - px(edges[i]), py(0.8) - py(c));
                }
            });
        },
        hover: (x) => {
            const i = edges.findIndex((e, k) => k < edges.length - 1 && x >= e && x <= edges[k + 1]);
            if (i < 0) {
                return null;
            }
            return `[${fmt(edges[i])}, ${fmt(edges[i + 1])}) · ${counts[i]} at step ${d.step}` + (d.compare ? ` · ${other[i]} at step ${d.compare.step}` : '');
        },
    });
    const table = $('hist-stats');
    const row = (k: string, a: string, b?: string) => h('tr', {}, h('th', { text: k }), h('td', { text: a }), ...(b !== undefined ? [h('td', { text: b })] : []));
    const s = d.stats;
    const c = d.compare?.stats;
    table.replaceChildren(
        h('tr', {}, h('th', {}), h('th', { text: here }), ...(c ? [h('th', { text: `step ${d.compare!.step}` })] : [])),
        ...(['n', 'min', 'max', 'mean', 'std'] as const).map((k) => row(k, fmt(s[k]), c ? fmt(c[k]) : undefined)),
        row('zeros', `${(100 * s.zeros).toFixed(1)}%`, c ? `${(100 * c.zeros).toFixed(1)}%` : undefined),
        row('NaN/Inf', String(s.nonfinite), c ? String(c.nonfinite) : undefined));
}

function projection(p: ProjectionData, tensors: TensorEntry[], run: RunInfo): void {
    message('projection', p.dropped ? `${p.dropped} rows with NaN/Inf left out` : '');
    fill('proj-tensor', tensorOptions(tensors, (t) => t.shape.length >= 2 && t.role !== 'input', run.anomaly?.step ?? null), String(p.id));
    fill('proj-method', [['pca', 'PCA'], ['tsne', 't-SNE (scikit-learn)']], p.method);
    fill('proj-color', [['row', p.shape.length === 2 ? 'row (token id)' : 'sample'], ['position', 'position'], ['step', 'step'], ['norm', 'row norm']], p.color);
    const ex = p.explained ? ` · explained ${p.explained.map((e) => `${((e ?? 0) * 100).toFixed(1)}%`).join(', ')}` : '';
    $('proj-info').textContent = `${p.method.toUpperCase()} of ${p.module} ${p.role} [${p.shape.join('×')}] at step ${p.steps.join(', ')} · ${p.x.length} points${ex}`;
    const xs = p.x.map((v) => v ?? 0);
    const ys = p.y.map((v) => v ?? 0);
    const cs = p.c.map((v) => v ?? 0);
    const bound = (a: number[]) => {
        const lo = Math.min(...a);
        const hi = Math.max(...a);
        const pad = (hi - lo) * 0.05 || 1;
        return [lo - pad, hi + pad] as [number, number];
    };
    const [x0, x1] = bound(xs);
    const [y0, y1] = bound(ys);
    const [c0, c1] = [Math.min(...cs), Math.max(...cs)];
    const shade = (v: number) => 0.2 + 0.8 * (c1 > c0 ? (v - c0) / (c1 - c0) : 0.5); // viridis' darkest fifth is lost on a dark theme
    const bar = h('canvas', { width: '100', height: '10' });
    const bctx = bar.getContext('2d');
    for (let i = 0; bctx && i < 100; i++) {
        bctx.fillStyle = color(0.2 + 0.8 * (i / 99), 'viridis');
        bctx.fillRect(i, 0, 1, 10);
    }
    $('proj-scale').replaceChildren(`${p.color} ${fmt(c0)} `, bar, ` ${fmt(c1)}`);
    const width = $('proj').clientWidth || 500;
    plotAt('proj', {
        height: Math.round(Math.max(260, Math.min(600, width * 0.55))), grid: true,
        x: { min: x0, max: x1, label: 'component 1' },
        y: { min: y0, max: y1, label: 'component 2' },
        draw: (ctx, px, py) => {
            const r = 2.5 * (window.devicePixelRatio || 1);
            xs.forEach((x, i) => {
                const [cr, cg, cb] = rgb(shade(cs[i]), 'viridis');
                ctx.fillStyle = `rgba(${cr},${cg},${cb},0.85)`;
                ctx.beginPath();
                ctx.arc(px(x), py(ys[i]), r, 0, 2 * Math.PI);
                ctx.fill();
            });
        },
        hover: (x, y) => {
            const u = plots.get('proj')?.u;
            if (!u || !xs.length) {
                return null;
            }
            const sx = (x1 - x0) / Math.max(1, u.bbox.width);
            const sy = (y1 - y0) / Math.max(1, u.bbox.height);
            let best = -1;
            let dist = Infinity;
            xs.forEach((px, i) => {
                const d = ((px - x) / sx) ** 2 + ((ys[i] - y) / sy) ** 2;
                if (d < dist) {
                    dist = d;
                    best = i;
                }
            });
            return best < 0 || dist > 400 ? null : `point ${best} · ${p.color} ${fmt(cs[best])} · (${fmt(xs[best])}, ${fmt(ys[best])})`;
        },
    });
}

function samples(s: SamplesData): void {
    message('samples', s.layers.length ? '' : 'No activation was captured at this step.');
    $('samples-info').textContent = `step ${s.step} · batch of ${s.batch}: sample ${s.anomalous} (red, the most unusual: ${fmt(s.ratio)}x the batch's median`
        + ` magnitude at its worst layer) beside sample ${s.normal} (blue, a typical one), layer by layer`;
    const labels = s.layers.map((l) => l.label);
    const all = s.layers.flatMap((l) => [l.anomalous.rms, l.normal.rms, l.anomalous.max, l.normal.max]).filter((v): v is number => v !== null && v > 0);
    const lo = all.length ? Math.min(...all) / 2 : 1e-3;
    const hi = all.length ? Math.max(...all) * 2 : 1;
    const width = $('samples').clientWidth || 600;
    const line = (ctx: CanvasRenderingContext2D, px: (x: number) => number, py: (y: number) => number, vals: (number | null)[], stroke: string, dash: number[]) => {
        ctx.save();
        ctx.strokeStyle = stroke;
        ctx.setLineDash(dash);
        ctx.lineWidth = 2 * (window.devicePixelRatio || 1);
        ctx.beginPath();
        vals.forEach((v, i) => {
            const y = py(Math.max(lo, v ?? hi));
            if (i === 0) {
                ctx.moveTo(px(i), y);
            } else {
                ctx.lineTo(px(i), y);
            }
        });
        ctx.stroke();
        ctx.fillStyle = stroke;
        vals.forEach((v, i) => ctx.fillRect(px(i) - 3, py(Math.max(lo, v ?? hi)) - 3, 6, 6));
        ctx.restore();
    };
    plotAt('samples', {
        height: Math.round(Math.max(260, Math.min(460, window.innerHeight * 0.5))), grid: true,
        x: { min: -0.5, max: labels.length - 0.5, splits: indexSplits(labels.length, width / 1.3, 18), values: (v) => labels[Math.round(v)] ?? '',
            rotate: labels.length > 4 ? -40 : 0, size: labels.length > 4 ? labelWidth(labels, 120) * 0.7 + 10 : 30 },
        y: { min: lo, max: hi, log: true, label: 'RMS (solid), max |x| (dashed)' },
        draw: (ctx, px, py) => {
            line(ctx, px, py, s.layers.map((l) => l.normal.rms), '#3b82f6', []);
            line(ctx, px, py, s.layers.map((l) => l.normal.max), '#3b82f6', [5, 4]);
            line(ctx, px, py, s.layers.map((l) => l.anomalous.rms), '#e5484d', []);
            line(ctx, px, py, s.layers.map((l) => l.anomalous.max), '#e5484d', [5, 4]);
        },
        hover: (x) => {
            const l = s.layers[Math.round(x)];
            if (!l) {
                return null;
            }
            return `${l.label} · sample ${s.anomalous}: RMS ${fmt(l.anomalous.rms)}, max ${fmt(l.anomalous.max)}${l.anomalous.nonfinite ? ', NaN/Inf' : ''}`
                + ` · sample ${s.normal}: RMS ${fmt(l.normal.rms)}, max ${fmt(l.normal.max)}`;
        },
        zoom: () => false,
    });
}

// -- export ---------------------------------------------------------------------------------------------------------

function exportPng(): void {
    const section = $(`view-${state.view}`);
    const canvases = [...section.querySelectorAll<HTMLCanvasElement>('.chart canvas')].filter((c) => c.width > 0 && c.height > 0);
    if (!canvases.length) {
        message(state.view, 'Nothing drawn to export yet.', true);
        return;
    }
    const scale = window.devicePixelRatio || 1;
    const title = `${$('run').textContent ?? ''} · ${LABELS[state.view]}`;
    const width = Math.max(...canvases.map((c) => c.width));
    const height = canvases.reduce((a, c) => a + c.height, 0) + 30 * scale;
    const out = document.createElement('canvas');
    out.width = width;
    out.height = height;
    const ctx = out.getContext('2d');
    if (!ctx) {
        return;
    }
    const style = getComputedStyle(document.body);
    ctx.fillStyle = style.getPropertyValue('--vscode-editor-background').trim() || '#1e1e1e';
    ctx.fillRect(0, 0, width, height);
    ctx.fillStyle = style.getPropertyValue('--vscode-foreground').trim() || '#ccc';
    ctx.font = `${13 * scale}px sans-serif`;
    ctx.fillText(title, 8 * scale, 20 * scale);
    let y = 30 * scale;
    for (const c of canvases) {
        ctx.drawImage(c, 0, y);
        y += c.height;
    }
    vscode.postMessage({ type: 'savePng', name: `gradsight-${state.view}.png`, dataUrl: out.toDataURL('image/png') });
}

// -- messages ---------------------------------------------------------------------------------------------------------

window.addEventListener('message', (event: MessageEvent<ToWebview>) => {
    const m = event.data;
    if (m.type === 'gradients') {
        const newRun = !panel || panel.run.path !== m.data.run.path;
        panel = m.data;
        fixes = m.fixes;
        if (newRun) {
            state.step = undefined;
            state.zoom = undefined;
            state.sandbox = {};
            for (const k of Object.keys(sandboxes) as SandboxView[]) {
                delete sandboxes[k];
            }
        }
        state.step = state.step ?? m.data.gradients.flow.step;
        $('run').textContent = runTitle(m.data.run);
        $('run').title = `${m.data.run.path}\nThe panel follows the newest run (the one the editor's decorations show).`;
        const hasAttention = m.data.tensors.some((t) => t.attention);
        $('tab-attention').classList.toggle('empty', !hasAttention);
        for (const v of ['histogram', 'projection', 'samples']) {
            $(`tab-${v}`).classList.toggle('empty', !m.data.tensors.length);
        }
        if (state.view === 'gradients') {
            drawGradients();
        } else if (newRun) {
            show(state.view);
        }
    } else if (m.type === 'sandbox') {
        sandboxes[m.data.view] = m.data;
        message(m.data.view, '');
        if (panel === undefined || m.data.run.path === panel.run.path) {
            $('run').textContent = runTitle(m.data.run);
        }
        if (state.view === m.data.view) {
            drawSandbox(m.data);
        }
    } else if (m.type === 'show') {
        if (m.view !== 'gradients' && m.module) {
            state.sandbox[m.view] = { view: m.view, module: m.module };
            delete sandboxes[m.view];
        }
        show(m.view);
    } else if (m.type === 'error') {
        message(m.view, m.message, true);
    } else if (m.type === 'saved') {
        message(state.view, `Saved ${m.what}: ${m.path}`);
    } else if (m.type === 'validating') {
        if (validating !== m.running) {
            validating = m.running;
            drawFixes();
        }
    }
});

page();
show(state.view);
vscode.postMessage({ type: 'ready', view: state.view });
