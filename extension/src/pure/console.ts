// gradsight's own lines in the Debug Console: debugpy forwards the training process's stderr as `stderr` output
// (red, like errors); gradsight's notes (`gradsight: anomaly at step 30: grad_explode`, the run's summary, where a
// watch paused) are information, so they go out as `stdout` while the user's own stderr stays as it is (pure).

export interface OutputBody {
    category?: string;
    output: string;
    [key: string]: unknown;
}

const OURS = /^(\r?\x1b\[K)?\r?gradsight[ :]/; // a line gradsight printed (the terminal progress line may lead with \r)

/** Split a stderr output event into runs of lines: gradsight's lines as `stdout`, the rest unchanged. */
export function recategorize(body: OutputBody): OutputBody[] {
    if (body.category !== 'stderr' || typeof body.output !== 'string' || !body.output.includes('gradsight')) {
        return [body];
    }
    const lines = body.output.match(/[^\n]*\n|[^\n]+$/g) ?? [body.output];
    const out: OutputBody[] = [];
    for (const line of lines) {
        const category = OURS.test(line) ? 'stdout' : 'stderr';
        const last = out[out.length - 1];
        if (last && last.category === category) {
            last.output += line;
        } else {
            out.push({ ...body, category, output: line });
        }
    }
    return out;
}
