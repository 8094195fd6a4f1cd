// What "Validate fixes" shows: the progress the server reports while `gradsight validate` re-runs the script, and the
// verdicts when it ends. No vscode here, so it is unit-tested alone.
import { verdictText } from './protocol';

/** One fix's verdict in the answer of the server's `gradsight.validate` command. */
export interface FixVerdict { id?: string; fix?: string; title?: string; verdict: string; summary?: string; effect?: string }
export interface ValidateResult { run?: string; fixes: FixVerdict[] }

/** `$/progress` values (LSP work-done progress), as far as this client reads them. */
export type ProgressValue =
    | { kind: 'begin'; title: string; message?: string; percentage?: number; cancellable?: boolean }
    | { kind: 'report'; message?: string; percentage?: number; cancellable?: boolean }
    | { kind: 'end'; message?: string };

export function fixId(f: FixVerdict): string {
    return f.id ?? f.fix ?? '?';
}

/** VS Code's progress takes increments; the server sends percentages. */
export class Increments {
    private last = 0;

    /** The increment that brings the bar to `percentage` (undefined when there is none to add). */
    next(percentage: number | undefined): number | undefined {
        if (percentage === undefined || !Number.isFinite(percentage)) {
            return undefined;
        }
        const to = Math.max(this.last, Math.min(100, percentage));
        const step = to - this.last;
        this.last = to;
        return step > 0 ? step : undefined;
    }
}

/** The progress notification's line for one `$/progress` value (undefined: nothing new to say). */
export function progressReport(v: ProgressValue, inc: Increments): { message?: string; increment?: number } | undefined {
    if (v.kind === 'end') {
        return undefined;
    }
    const out: { message?: string; increment?: number } = {};
    if (v.message) {
        out.message = v.message;
    }
    const increment = inc.next(v.percentage);
    if (increment !== undefined) {
        out.increment = increment;
    }
    return out.message !== undefined || out.increment !== undefined ? out : undefined;
}

/** The best fix a validation found working (the first validated one), if any. */
export function bestValidated(r: ValidateResult): FixVerdict | undefined {
    return r.fixes.find((f) => f.verdict === 'validated');
}

/** The message shown when a validation ends: how many fixes work, then each fix's verdict and what was measured. */
export function validationMessage(r: ValidateResult): { level: 'info' | 'warning'; text: string } {
    if (!r.fixes.length) {
        return { level: 'warning', text: 'gradsight: no fix to validate for this run.' };
    }
    const ok = r.fixes.filter((f) => f.verdict === 'validated').length;
    const head = ok ? `gradsight: ${ok} of ${r.fixes.length} fix${r.fixes.length === 1 ? '' : 'es'} validated`
        : `gradsight: none of ${r.fixes.length} fix${r.fixes.length === 1 ? '' : 'es'} removed the fault`;
    const each = r.fixes.map((f) => {
        const said = (f.verdict === 'validated' ? f.effect || f.summary : f.summary || f.effect) ?? '';
        const detail = said.replace(new RegExp(`^${verdictText(f.verdict)}:\\s*`, 'i'), '');
        return `${f.title ?? fixId(f)}: ${verdictText(f.verdict)}${detail ? ` (${detail})` : ''}`;
    });
    return { level: ok ? 'info' : 'warning', text: `${head}. ${each.join('; ')}` };
}
