// One chart of the panel: uPlot draws the axes and owns the scales, the cursor and the drag selection;
// what is inside the plotting area (heatmap cells, bars, points, lines) is drawn by the view's own function,
// so every chart reads values under the mouse, zooms by dragging and resets on a double click the same way.
import uPlot from 'uplot';
import { fmt, intSplits, logSplits } from '../pure/scale';

/** Tick text: short (1e+7, not 1.00e+7). */
const fmtTick = (v: number): string => fmt(v).replace(/\.?0+e/, 'e');

export interface AxisSpec {
    label?: string;
    log?: boolean; // a logarithmic scale (values must be > 0)
    reverse?: boolean; // first value at the top (heatmap rows)
    values?: (v: number) => string; // tick text
    splits?: (min: number, max: number) => number[]; // where ticks go
    size?: number; // space for the ticks' text, CSS px
    rotate?: number; // x tick text rotation, degrees
    integer?: boolean; // ticks on whole numbers only (steps)
}

export interface PlotSpec {
    height: number;
    x: AxisSpec & { min: number; max: number };
    y: AxisSpec & { min: number; max: number };
    /** Draw inside the plotting area; `px`/`py` map values to canvas pixels. */
    draw: (ctx: CanvasRenderingContext2D, px: (x: number) => number, py: (y: number) => number, u: uPlot) => void;
    /** Text for the value under the mouse (null: nothing there). */
    hover?: (x: number, y: number) => string | null;
    /** A click (not a drag) at these values. */
    click?: (x: number, y: number) => void;
    /** A drag along x selected [min, max]; the plot zooms to it unless this returns false. */
    zoom?: (min: number, max: number) => boolean | void;
    /** The x range was reset (double click). */
    reset?: () => void;
    syncKey?: string; // plots with one key share their cursor
    grid?: boolean;
}

const dpr = () => window.devicePixelRatio || 1;

export class Plot {
    readonly u: uPlot;
    private readonly tip: HTMLDivElement;
    private readonly observer: ResizeObserver;
    private down: { x: number; y: number } | null = null;

    constructor(private readonly host: HTMLElement, private spec: PlotSpec) {
        host.classList.add('plot');
        this.tip = document.createElement('div');
        this.tip.className = 'tip';
        this.tip.hidden = true;
        host.appendChild(this.tip);
        const style = getComputedStyle(document.body);
        const fg = style.getPropertyValue('--vscode-foreground').trim() || '#ccc';
        const gridColor = style.getPropertyValue('--vscode-editorWidget-border').trim() || 'rgba(128,128,128,0.25)';
        const font = `11px ${style.getPropertyValue('--vscode-font-family') || 'sans-serif'}`;
        // the axes read the current spec, so update() can change their labels and ticks
        const live = (i: number): AxisSpec => (i === 0 ? this.spec.x : this.spec.y);
        const axis = (a: AxisSpec, i: number, side: 0 | 1 | 2 | 3): uPlot.Axis => {
            // uPlot merges options over its defaults: a key set to undefined would replace a default, so only set keys
            const out: uPlot.Axis = {
                side, stroke: fg, font, labelFont: font, labelSize: a.label ? 16 : 0, space: a.log ? 36 : i === 0 ? 60 : 30,
                grid: { show: spec.grid ?? false, stroke: gridColor, width: 1 }, ticks: { show: true, stroke: gridColor, width: 1, size: 4 },
                values: (_u: uPlot, splits: number[]) => splits.map((v) => {
                    const f = live(i).values;
                    return v === null || v === undefined ? '' : f ? f(v) : fmtTick(v);
                }),
            };
            if (a.label) {
                out.label = a.label;
            }
            if (a.size !== undefined) {
                out.size = a.size;
            } else if (i === 0 && !a.rotate) {
                out.size = 30; // the step numbers, not uPlot's roomier default
            }
            if (a.rotate) {
                out.rotate = a.rotate;
            }
            if (a.splits) {
                out.splits = (_u: uPlot, _i: number, min: number, max: number) => (live(i).splits ?? a.splits!)(min, max);
            }
            if (a.integer && !a.splits) {
                out.splits = (u: uPlot, _i: number, min: number, max: number) => intSplits(min, max, (i === 0 ? u.bbox.width : u.bbox.height) / dpr());
            }
            if (a.log && !a.splits) {
                out.splits = (_u: uPlot, _i: number, min: number, max: number) => logSplits(min, max);
            }
            return out;
        };
        const opts: uPlot.Options = {
            width: Math.max(200, host.clientWidth),
            height: spec.height,
            legend: { show: false },
            padding: [8, 12, 0, 0],
            cursor: {
                x: true, y: true, points: { show: false },
                drag: { x: true, y: false, setScale: false, dist: 4 },
                sync: spec.syncKey ? { key: spec.syncKey } : undefined,
            },
            scales: {
                x: { time: false, auto: false, range: () => [this.spec.x.min, this.spec.x.max], distr: spec.x.log ? 3 : 1 },
                y: { auto: false, range: () => [this.spec.y.min, this.spec.y.max], distr: spec.y.log ? 3 : 1, dir: spec.y.reverse ? -1 : 1 },
            },
            axes: [axis(spec.x, 0, 2), axis(spec.y, 1, 3)],
            series: [{}, { show: true, paths: () => null, points: { show: false } }],
            hooks: {
                draw: [(u) => this.paint(u)],
                setCursor: [(u) => this.cursorMoved(u)],
                setSelect: [(u) => this.selected(u)],
            },
        };
        this.u = new uPlot(opts, [[spec.x.min, spec.x.max], [null, null]] as unknown as uPlot.AlignedData, host);
        this.u.over.addEventListener('mousedown', (e) => { this.down = { x: e.clientX, y: e.clientY }; });
        this.u.over.addEventListener('mouseup', (e) => {
            const d = this.down;
            this.down = null;
            if (d && Math.abs(e.clientX - d.x) < 4 && Math.abs(e.clientY - d.y) < 4 && this.spec.click) {
                const { left, top } = this.u.cursor;
                if (left !== undefined && top !== undefined && left >= 0) {
                    this.spec.click(this.u.posToVal(left, 'x'), this.u.posToVal(top, 'y'));
                }
            }
        });
        this.u.over.addEventListener('dblclick', () => {
            this.setX(this.spec.x.min, this.spec.x.max, true);
            this.spec.reset?.();
        });
        this.u.over.addEventListener('mouseleave', () => { this.tip.hidden = true; });
        this.observer = new ResizeObserver(() => this.fit());
        this.observer.observe(host);
    }

    /** Replace what the plot shows (same axes kinds); keeps the zoom unless `keepZoom` is false. */
    update(spec: PlotSpec, keepZoom = false): void {
        const zoomed = keepZoom ? this.xRange() : null;
        this.spec = spec;
        this.u.batch(() => {
            this.setX(zoomed ? zoomed[0] : spec.x.min, zoomed ? zoomed[1] : spec.x.max, false);
            this.u.setScale('y', { min: spec.y.min, max: spec.y.max });
            if (this.u.height !== spec.height) {
                this.fit();
            }
        });
        this.u.redraw(false, true);
    }

    xRange(): [number, number] {
        const s = this.u.scales.x;
        return [s.min ?? this.spec.x.min, s.max ?? this.spec.x.max];
    }

    setX(min: number, max: number, redraw = true): void {
        this.u.scales.x.range = () => [min, max];
        this.u.setScale('x', { min, max });
        if (redraw) {
            this.u.redraw(false, true);
        }
    }

    canvas(): HTMLCanvasElement {
        return this.u.ctx.canvas;
    }

    destroy(): void {
        this.observer.disconnect();
        this.u.destroy();
        this.tip.remove();
    }

    private fit(): void {
        const width = Math.max(200, Math.floor(this.host.clientWidth));
        if (width !== this.u.width || this.spec.height !== this.u.height) {
            this.u.setSize({ width, height: this.spec.height });
        }
    }

    private paint(u: uPlot): void {
        const ctx = u.ctx;
        const { left, top, width, height } = u.bbox;
        ctx.save();
        ctx.beginPath();
        ctx.rect(left, top, width, height);
        ctx.clip();
        this.spec.draw(ctx, (x) => u.valToPos(x, 'x', true), (y) => u.valToPos(y, 'y', true), u);
        ctx.restore();
    }

    private cursorMoved(u: uPlot): void {
        const { left, top } = u.cursor;
        if (!this.spec.hover || left === undefined || top === undefined || left < 0 || top < 0) {
            this.tip.hidden = true;
            return;
        }
        const text = this.spec.hover(u.posToVal(left, 'x'), u.posToVal(top, 'y'));
        if (!text) {
            this.tip.hidden = true;
            return;
        }
        this.tip.textContent = text;
        this.tip.hidden = false;
        const plotLeft = u.bbox.left / dpr();
        const plotTop = u.bbox.top / dpr();
        const x = plotLeft + left + 14;
        const w = this.tip.offsetWidth;
        this.tip.style.left = `${Math.max(0, x + w > this.host.clientWidth ? plotLeft + left - w - 10 : x)}px`;
        this.tip.style.top = `${plotTop + top + 12}px`;
    }

    private selected(u: uPlot): void {
        const s = u.select;
        if (s.width < 4) {
            return;
        }
        const min = u.posToVal(s.left, 'x');
        const max = u.posToVal(s.left + s.width, 'x');
        u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
        if (this.spec.zoom?.(min, max) !== false) {
            this.setX(min, max);
        }
    }
}

/** Categorical ticks: one per index that fits, every k-th when they are many. */
export function indexSplits(n: number, pixels: number, per = 14): (min: number, max: number) => number[] {
    return (min, max) => {
        const lo = Math.max(0, Math.ceil(min));
        const hi = Math.min(n - 1, Math.floor(max));
        const count = hi - lo + 1;
        const step = Math.max(1, Math.ceil(count / Math.max(1, Math.floor(pixels / per))));
        const out: number[] = [];
        for (let i = lo; i <= hi; i += step) {
            out.push(i);
        }
        return out;
    };
}

/** The width, in CSS px, the longest of these labels needs in the panel's font (capped). */
export function labelWidth(labels: string[], cap: number): number {
    const ctx = document.createElement('canvas').getContext('2d');
    if (!ctx) {
        return Math.min(cap, 8 * Math.max(0, ...labels.map((l) => l.length)));
    }
    ctx.font = `11px ${getComputedStyle(document.body).getPropertyValue('--vscode-font-family') || 'sans-serif'}`;
    return Math.min(cap, Math.ceil(Math.max(20, ...labels.map((l) => ctx.measureText(l).width))) + 14);
}

