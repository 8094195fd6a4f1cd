// What the language server's panel commands answer (gradsight.panelData, gradsight.sandbox), and the messages
// between the extension and the panel's webview. Mirrors pyserver/gradsight/viz/panels.py and server/commands.py.
// Non-finite numbers arrive as null (JSON has no NaN); their places are listed beside them.

export interface RunInfo {
    path: string;
    name: string;
    script: string | null;
    status: string | null;
    started: number | null;
    step: number | null;
    model: string | null;
    health: number | null;
    anomaly: { step: number; trigger: string; title?: string } | null;
    rootCause: { module: string; kind: string; confidence: number; path: string[] } | null;
    error: string | null;
}

export interface Row {
    module: string;
    label: string;
    type: string;
    file: string | null;
    line: number | null;
    health: number | null;
}

export interface Series {
    steps: number[];
    values: (number | null)[];
    nonfinite: number[];
}

export interface Gradients {
    range: [number, number]; // the run's first and last step with gradient norms
    steps: number[]; // first step of each column
    until: number[]; // last step of each column (equal to steps unless bucketed)
    bucketed: boolean;
    rows: Row[];
    values: (number | null)[][]; // rows x columns: gradient norm (the bucket's largest)
    nonfinite: [number, number][]; // [row, column] of NaN/Inf norms
    flow: { step: number; values: (number | null)[] };
    loss: Series;
    gradNorm: Series;
    anomaly: number | null;
}

export interface TensorEntry {
    id: number;
    step: number;
    module: string;
    label: string;
    type: string | null;
    role: string;
    shape: number[];
    dtype: string;
    attention: boolean;
}

export interface PanelData {
    run: RunInfo;
    gradients: Gradients;
    tensors: TensorEntry[];
}

export interface Stats { n: number; nonfinite: number; zeros: number; min: number | null; max: number | null; mean: number | null; std: number | null }

export interface HistogramData {
    id: number; module: string; role: string; step: number; shape: number[];
    edges: (number | null)[]; counts: number[]; stats: Stats;
    compare: { id: number; step: number; counts: number[]; stats: Stats } | null;
}

export interface AttentionData {
    id: number; module: string; role: string; step: number; shape: [number, number, number, number];
    sample: number; head: number; map: (number | null)[][]; nonfinite: number;
    entropy: (number | null)[]; entropySample: (number | null)[]; collapsed: number[]; collapsedBelow: number;
    tokens: string[] | null;
}

export interface ProjectionData {
    id: number; module: string; role: string; step: number; shape: number[]; method: string; color: string;
    x: (number | null)[]; y: (number | null)[]; c: (number | null)[]; dropped: number; explained: (number | null)[] | null; steps: number[];
}

export interface SampleLayer {
    module: string; label: string; id: number;
    anomalous: { rms: number | null; max: number | null; nonfinite: boolean };
    normal: { rms: number | null; max: number | null; nonfinite: boolean };
}

export interface SamplesData { step: number; batch: number; anomalous: number; normal: number; ratio: number | null; layers: SampleLayer[] }

export type SandboxView = 'histogram' | 'attention' | 'projection' | 'samples';
export type View = 'gradients' | SandboxView;
export const VIEWS: View[] = ['gradients', 'attention', 'histogram', 'projection', 'samples'];

export type SandboxData =
    | { view: 'histogram'; run: RunInfo; tensors: TensorEntry[]; data: HistogramData }
    | { view: 'attention'; run: RunInfo; tensors: TensorEntry[]; data: AttentionData }
    | { view: 'projection'; run: RunInfo; tensors: TensorEntry[]; data: ProjectionData }
    | { view: 'samples'; run: RunInfo; tensors: TensorEntry[]; data: SamplesData };

export interface GradientsArgs { steps?: [number, number]; modules?: string; step?: number; maxColumns?: number }
export interface SandboxArgs { view: SandboxView; tensor?: number; module?: string; head?: number; sample?: number; method?: string; color?: string; step?: number }

/** What `gradsight validate` (a re-run of the script with the fix) said of a fix. */
export type Verdict = 'validated' | 'did_not_help' | 'worse' | 'failed';
export interface Validated { verdict: Verdict; summary: string; effect: string }
export interface Fix {
    id: string;
    title: string;
    validated?: Validated | null;
    hidden?: boolean; // not offered: a re-run showed it harms, or it is in the code already
    applied?: boolean; // in the code already
    effect?: string; // what the library expects of it (before any validation)
}

const VERDICT_TEXT: Record<Verdict, string> = {
    validated: 'validated', did_not_help: 'did not help', worse: 'made it worse', failed: 'the re-run failed',
};

export function isVerdict(v: unknown): v is Verdict {
    return typeof v === 'string' && Object.prototype.hasOwnProperty.call(VERDICT_TEXT, v);
}

/** `validated`, `did not help`, ...; a verdict this client does not know as it is. */
export function verdictText(v: string): string {
    return isVerdict(v) ? VERDICT_TEXT[v] : v.replace(/_/g, ' ');
}

/** What the panel says of a fix beside its button: the effect a re-run measured, or the one expected. */
export function fixNote(f: Fix): string {
    if (f.applied) {
        return f.validated && isVerdict(f.validated.verdict) ? `applied (${verdictText(f.validated.verdict)})` : 'applied';
    }
    const v = f.validated;
    if (v && isVerdict(v.verdict)) {
        const said = v.verdict === 'validated' ? (v.effect || v.summary) : (v.summary || v.effect);
        return said ? `${verdictText(v.verdict)}: ${stripVerdict(said, v.verdict)}` : verdictText(v.verdict);
    }
    return f.effect ? `expected: ${f.effect} (not validated yet)` : 'not validated yet';
}

function stripVerdict(text: string, v: Verdict): string { // "validated: no loss spike ..." -> "no loss spike ..."
    const head = `${verdictText(v)}: `;
    return text.toLowerCase().startsWith(head) ? text.slice(head.length) : text;
}

// extension -> webview
export type ToWebview =
    | { type: 'gradients'; data: PanelData; fixes: Fix[] }
    | { type: 'sandbox'; data: SandboxData }
    | { type: 'show'; view: View; module?: string }
    | { type: 'error'; view: View; message: string }
    | { type: 'saved'; what: string; path: string }
    | { type: 'validating'; running: boolean; message?: string };

// webview -> extension
export type FromWebview =
    | { type: 'ready'; view: View }
    | { type: 'gradients'; args: GradientsArgs }
    | { type: 'sandbox'; args: SandboxArgs }
    | { type: 'reveal'; file: string; line: number; module: string; step?: number }
    | { type: 'applyFix'; id: string }
    | { type: 'validateFixes' }
    | { type: 'savePng'; name: string; dataUrl: string }
    | { type: 'exportPdf' };

export function isView(v: unknown): v is View {
    return typeof v === 'string' && (VIEWS as string[]).includes(v);
}

/** A one-line description of the run a panel shows. */
export function runTitle(r: RunInfo): string {
    const parts = [r.name];
    if (r.script) {
        parts.push(r.script.split(/[\\/]/).pop() ?? r.script);
    }
    parts.push(r.status ?? 'unknown');
    if (r.step !== null) {
        parts.push(`step ${r.step}`);
    }
    if (r.health !== null) {
        parts.push(`model health ${r.health}`);
    }
    if (r.anomaly) {
        parts.push(`${r.anomaly.title ?? r.anomaly.trigger} at step ${r.anomaly.step}`);
    }
    return parts.join(' · ');
}
