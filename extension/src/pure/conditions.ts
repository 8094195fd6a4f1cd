// Tensor-breakpoint conditions as VS Code stores them (pure: no vscode import).
//
// On a training-loop line the breakpoint's condition is a call into the runtime,
//   __import__('gradsight').check("grad_norm > 50")
// On a layer line it is a marker that never stops there and names the watch,
//   __import__('gradsight').layer_watch("grad_norm > 50", "encoder.layer.*.query")
// Strings are written as JSON literals, which Python reads the same way.

/** Metrics only gradsight knows; `loss` and `step` alone are ordinary Python and left alone. */
export const TENSOR_METRICS = [
    'grad_norm', 'grad_max', 'weight_norm', 'update_ratio', 'act_max', 'act_min', 'act_std', 'dead_frac', 'nan_count',
];

const CALL = /^\s*__import__\((['"])gradsight\1\)\.(check|layer_watch)\((.*)\)\s*$/s;

export interface GradsightCondition {
    kind: 'check' | 'layer';
    expression: string;
    scope?: string;
}

export function checkCondition(expression: string): string {
    return `__import__('gradsight').check(${JSON.stringify(expression)})`;
}

export function layerWatchCondition(expression: string, scope: string | null | undefined): string {
    const args = scope ? `${JSON.stringify(expression)}, ${JSON.stringify(scope)}` : JSON.stringify(expression);
    return `__import__('gradsight').layer_watch(${args})`;
}

/** The gradsight call in a breakpoint's condition, or undefined for any other condition. */
export function parseGradsightCondition(condition: string | undefined): GradsightCondition | undefined {
    if (!condition) {
        return undefined;
    }
    const m = CALL.exec(condition);
    if (!m) {
        return undefined;
    }
    const args = readStringArgs(m[3]);
    if (!args || args.length === 0 || args.length > 2) {
        return undefined;
    }
    return { kind: m[2] === 'check' ? 'check' : 'layer', expression: args[0], scope: args[1] };
}

/** `"a", 'b'` -> ['a', 'b'] for string literals only; undefined for anything else. */
function readStringArgs(text: string): string[] | undefined {
    const literal = /\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*(,|$)/y;
    const out: string[] = [];
    let at = 0;
    while (at < text.length) {
        literal.lastIndex = at;
        const m = literal.exec(text);
        if (!m) {
            return undefined;
        }
        let lit = m[1];
        if (lit.startsWith("'")) { // a Python single-quoted string: re-quote it as JSON
            lit = '"' + lit.slice(1, -1).replace(/\\'/g, "'").replace(/(^|[^\\])"/g, '$1\\"') + '"';
        }
        try {
            out.push(JSON.parse(lit) as string);
        } catch {
            return undefined;
        }
        at = literal.lastIndex;
        if (m[2] === '') {
            break;
        }
    }
    return at >= text.trimEnd().length ? out : undefined;
}

/** A condition typed by hand in VS Code's breakpoint UI that only gradsight can evaluate. */
export function looksLikeTensorCondition(condition: string | undefined): boolean {
    if (!condition || parseGradsightCondition(condition) || condition.includes('__import__')) {
        return false;
    }
    const stripped = condition.replace(/(['"])(?:\\.|(?!\1).)*\1/g, '""');
    if (/\blayer\s*\(/.test(stripped)) {
        return true;
    }
    return TENSOR_METRICS.some((m) => new RegExp(`(^|[^\\w.])${m}\\b`).test(stripped));
}
