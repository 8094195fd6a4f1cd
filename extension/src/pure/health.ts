// The decoration model: gradsight/health notifications -> what each editor shows (pure: no vscode import).

export type Severity = 'ok' | 'info' | 'warning' | 'error';
export const SEVERITIES: Severity[] = ['ok', 'info', 'warning', 'error'];

export interface HealthRecord {
    uri: string;
    line: number; // 0-based
    module: string;
    health: number;
    severity: string;
    summary: string;
    instances?: number; // instances of one creating call or class attribute (the worst one is `module`)
    layers?: number; // different layers written on this line
    label?: string; // readable name (model[2])
    model?: boolean; // the model's own line: `health` is the model's
    kinds?: string[];
}

export interface RunState {
    run: string | null;
    status?: string | null;
    step?: number | null;
    loss?: number | null;
    anomalies?: number;
    health?: number | null;
    error?: string | null;
    slowdown?: number | null; // 1 + gradsight's own share of the step time, when the runtime warned of it
    overhead?: string | null; // what the runtime said then
}

export interface HealthNotification {
    run: string | null;
    step: number | null;
    state: RunState;
    records: HealthRecord[];
}

export interface LineDecoration {
    line: number;
    text: string;
    hover: string;
}

export function severityOf(value: string): Severity {
    return (SEVERITIES as string[]).includes(value) ? (value as Severity) : 'info';
}

/** Holds the latest records per document; a new run clears everything. */
export class HealthModel {
    run: string | null = null;
    state: RunState = { run: null };
    private byUri = new Map<string, HealthRecord[]>();

    /** Apply a notification; true when it started a new run (decorations must be cleared first). */
    update(n: HealthNotification): boolean {
        const newRun = n.run !== this.run;
        this.run = n.run;
        this.state = n.state ?? { run: n.run };
        this.byUri.clear();
        for (const r of n.records ?? []) {
            const list = this.byUri.get(r.uri) ?? [];
            list.push(r);
            this.byUri.set(r.uri, list);
        }
        return newRun;
    }

    records(uri: string): HealthRecord[] {
        return this.byUri.get(uri) ?? [];
    }

    /** Decorations for one document, grouped by severity (one per line, the worst record wins). */
    decorations(uri: string): Map<Severity, LineDecoration[]> {
        const worst = new Map<number, HealthRecord>();
        for (const r of this.records(uri)) {
            const seen = worst.get(r.line);
            if (!seen || r.health < seen.health) {
                worst.set(r.line, r);
            }
        }
        const out = new Map<Severity, LineDecoration[]>(SEVERITIES.map((s) => [s, []]));
        for (const r of [...worst.values()].sort((a, b) => a.line - b.line)) {
            out.get(severityOf(r.severity))!.push({ line: r.line, text: r.summary, hover: `gradsight: ${r.summary}${whose(r)}` });
        }
        return out;
    }
}

/** Which module a line's record speaks of, for its hover: the model, the worst of several layers or instances, or one layer. */
export function whose(r: HealthRecord): string {
    const name = r.label ?? r.module;
    if (r.model) {
        return name && name !== '(model)' && name !== 'model' ? ` (the model, ${name})` : ' (the model)';
    }
    if (r.layers && r.layers > 1) {
        return ` (worst of ${r.layers} layers on this line: ${name})`;
    }
    if (r.instances && r.instances > 1) {
        return ` (worst of ${r.instances} instances: ${name})`;
    }
    return ` (${name})`;
}

/** The status bar's text for a run's state. */
export function statusText(s: RunState): string {
    if (!s.run) {
        return '$(pulse) gradsight: no run';
    }
    if (s.error) {
        return /no step yet|recorded no training step/.test(s.error) ? '$(sync~spin) gradsight: waiting for the first step' : '$(warning) gradsight: run unreadable';
    }
    const parts = [`step ${s.step ?? '-'}`];
    if (typeof s.loss === 'number') {
        parts.push(`loss ${formatNumber(s.loss)}`);
    }
    const n = s.anomalies ?? 0;
    parts.push(n === 1 ? '1 anomaly' : `${n} anomalies`);
    if (typeof s.slowdown === 'number' && Number.isFinite(s.slowdown)) {
        parts.push(`gradsight ${s.slowdown.toFixed(1)}x slower`); // its own cost, not the model's
    }
    const icon = s.status === 'running' ? '$(sync~spin)' : n > 0 ? '$(warning)' : '$(pass)';
    return `${icon} gradsight ${parts.join(' · ')}`;
}

export function formatNumber(x: number): string {
    if (!Number.isFinite(x)) {
        return String(x);
    }
    const a = Math.abs(x);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(2) : Number(x.toPrecision(4)).toString();
}
