// Colour scales and number formats for the panel's charts (pure: no DOM, no vscode; unit-tested).

export type Scale = 'log' | 'linear';

// viridis-like anchors (dark blue -> teal -> yellow) and magma-like ones (black -> purple -> orange -> cream)
const VIRIDIS: [number, number, number][] = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const MAGMA: [number, number, number][] = [[0, 0, 4], [81, 18, 124], [183, 55, 121], [252, 137, 97], [252, 253, 191]];
export const NONFINITE_COLOR = '#ff2d55'; // NaN/Inf cells: a colour no scale reaches

export type Palette = 'viridis' | 'magma';

/** The colour of t in [0, 1] on a palette, as `rgb(r,g,b)`. */
export function color(t: number, palette: Palette = 'magma'): string {
    const [r, g, b] = rgb(t, palette);
    return `rgb(${r},${g},${b})`;
}

export function rgb(t: number, palette: Palette = 'magma'): [number, number, number] {
    const stops = palette === 'viridis' ? VIRIDIS : MAGMA;
    const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (stops.length - 1);
    const i = Math.min(stops.length - 2, Math.floor(x));
    const f = x - i;
    const a = stops[i];
    const b = stops[i + 1];
    return [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * f)) as [number, number, number];
}

/** The value as the scale sees it: log10 for 'log' (non-positive values have none), itself for 'linear'. */
export function transform(v: number | null, scale: Scale): number | null {
    if (v === null || !Number.isFinite(v)) {
        return null;
    }
    if (scale === 'log') {
        return v > 0 ? Math.log10(v) : null;
    }
    return v;
}

/** The colour range of a matrix: the 1st and 99.5th percentiles of its transformed finite values. */
export function extent(values: (number | null)[][], scale: Scale): [number, number] {
    const flat: number[] = [];
    for (const row of values) {
        for (const v of row) {
            const t = transform(v, scale);
            if (t !== null) {
                flat.push(t);
            }
        }
    }
    if (!flat.length) {
        return [0, 1];
    }
    flat.sort((a, b) => a - b);
    const at = (q: number) => flat[Math.min(flat.length - 1, Math.max(0, Math.round(q * (flat.length - 1))))];
    let lo = at(0.01);
    let hi = at(0.995);
    if (hi <= lo) {
        lo -= 0.5;
        hi += 0.5;
    }
    return [lo, hi];
}

/** Position of a value in a colour range, clamped to [0, 1]. */
export function unit(t: number, range: [number, number]): number {
    return Math.min(1, Math.max(0, (t - range[0]) / (range[1] - range[0])));
}

/** The column of a step: the bucket whose [steps[i], until[i]] holds it, else the nearest; -1 for no columns. */
export function columnOf(step: number, steps: number[], until: number[]): number {
    if (!steps.length) {
        return -1;
    }
    let lo = 0;
    let hi = steps.length - 1;
    while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (steps[mid] <= step) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if (step > until[lo] && lo + 1 < steps.length && steps[lo + 1] - step < step - until[lo]) {
        return lo + 1;
    }
    return lo;
}

/** A number for a tooltip or an axis: 4 significant digits, exponent form when tiny or huge. */
export function fmt(x: number | null | undefined): string {
    if (x === null || x === undefined) {
        return '-';
    }
    if (!Number.isFinite(x)) {
        return Number.isNaN(x) ? 'NaN' : x > 0 ? 'Inf' : '-Inf';
    }
    const a = Math.abs(x);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) {
        return x.toExponential(2);
    }
    return String(Number(x.toPrecision(4)));
}

/** Evenly spaced indices from 0 to n-1, at most `most` of them (axis ticks of a long list of names). */
export function ticks(n: number, most: number): number[] {
    if (n <= 0) {
        return [];
    }
    const step = Math.max(1, Math.ceil(n / Math.max(1, most)));
    const out: number[] = [];
    for (let i = 0; i < n; i += step) {
        out.push(i);
    }
    return out;
}

/** Shannon entropy in nats of a probability row (zeros skipped). */
export function entropy(p: (number | null)[]): number {
    let h = 0;
    for (const x of p) {
        if (x !== null && x > 0) {
            h -= x * Math.log(x);
        }
    }
    return h;
}

/** Ticks of a logarithmic axis: every decade when the range spans several, else 1, 2 and 5 times each power of ten. */
export function logSplits(min: number, max: number): number[] {
    if (!(min > 0) || !(max > min)) {
        return [];
    }
    const lo = Math.floor(Math.log10(min));
    const hi = Math.ceil(Math.log10(max));
    const mantissas = hi - lo >= 3 ? [1] : hi - lo >= 2 ? [1, 3] : [1, 2, 5];
    const out: number[] = [];
    for (let k = lo; k <= hi; k++) {
        for (const m of mantissas) {
            const v = m * 10 ** k;
            if (v >= min && v <= max) {
                out.push(v);
            }
        }
    }
    return out;
}

/** Whole-number ticks at a round increment (1, 2, 5, 10, 20, 50, ...), about one per `space` CSS pixels. */
export function intSplits(min: number, max: number, pixels: number, space = 60): number[] {
    const span = max - min;
    if (!(span > 0) || !(pixels > 0)) {
        return [];
    }
    const want = Math.max(1, Math.floor(pixels / space));
    const raw = span / want;
    const p = 10 ** Math.floor(Math.log10(Math.max(1, raw)));
    const step = Math.max(1, [1, 2, 5, 10].map((m) => m * p).find((x) => x >= raw) ?? 10 * p);
    const out: number[] = [];
    for (let v = Math.ceil(min / step) * step; v <= max; v += step) {
        out.push(v + 0); // no -0
    }
    return out;
}
