// Configuration resolution: the interpreter, and a `gradsight` launch -> debugpy's launch (pure: no vscode import).

export interface Interpreter {
    command: string[];
    source: 'setting' | 'python-extension' | 'default';
}

/** The setting if set, else the Python extension's interpreter, else python3. `${workspaceFolder}` is expanded. */
export function resolveInterpreter(setting: string | undefined, fromPython: string[] | undefined, workspaceFolder?: string): Interpreter {
    const expand = (s: string) => (workspaceFolder ? s.replace(/\$\{workspaceFolder\}/g, workspaceFolder) : s);
    if (setting && setting.trim()) {
        return { command: [expand(setting.trim())], source: 'setting' };
    }
    if (fromPython && fromPython.length > 0 && fromPython[0]) {
        return { command: fromPython.map(expand), source: 'python-extension' };
    }
    return { command: ['python3'], source: 'default' };
}

export interface GradsightLaunch {
    type: string;
    request: string;
    name: string;
    program?: string;
    args?: string[];
    cwd?: string;
    output?: string;
    triggers?: string;
    breaks?: string[];
    every?: number;
    python?: string | string[];
    justMyCode?: boolean;
    env?: Record<string, string>;
    [key: string]: unknown;
}

export class LaunchError extends Error {}

/** `gradsight trace` arguments: the script, its run store, triggers, and every tensor breakpoint as --break. */
export function traceArgs(cfg: GradsightLaunch, watches: string[], defaultOutput: string): string[] {
    if (!cfg.program) {
        throw new LaunchError('the gradsight launch configuration needs "program": the training script to run');
    }
    const args = ['trace', cfg.program, '--output', cfg.output || defaultOutput];
    if (cfg.triggers) {
        args.push('--trigger', cfg.triggers);
    }
    if (cfg.every !== undefined) {
        if (!Number.isInteger(cfg.every) || cfg.every < 1) {
            throw new LaunchError(`"every" must be a positive whole number of steps, got ${JSON.stringify(cfg.every)}`);
        }
        args.push('--every', String(cfg.every));
    }
    for (const b of [...(cfg.breaks ?? []), ...watches]) {
        args.push('--break', b);
    }
    args.push('--', ...(cfg.args ?? []));
    return args;
}

export const GRADSIGHT_FRAMES = [{ module: 'gradsight', include: false }, { path: '**/gradsight/__main__.py', include: false }];

/** The launch debugpy's adapter receives: `python -m gradsight trace ...` in the user's interpreter. */
export function toDebugpyLaunch(cfg: GradsightLaunch, interpreter: string[], watches: string[], defaultOutput: string): GradsightLaunch {
    const python = cfg.python ? (Array.isArray(cfg.python) ? cfg.python : [cfg.python]) : interpreter;
    return {
        ...cfg,
        type: cfg.type,
        request: 'launch',
        name: cfg.name,
        module: 'gradsight',
        args: traceArgs(cfg, watches, defaultOutput),
        python,
        cwd: cfg.cwd,
        justMyCode: cfg.justMyCode ?? true,
        console: (cfg.console as string | undefined) ?? 'internalConsole',
        // gradsight's own frames are library code: never in the Call Stack, never stepped into (its package by module
        // name; its __main__.py, which runs as the module __main__, by path)
        rules: [...((cfg.rules as unknown[] | undefined) ?? []), ...GRADSIGHT_FRAMES],
        program: undefined,
        env: { PYDEVD_DISABLE_FILE_VALIDATION: '1', ...(cfg.env ?? {}) },
    };
}

/** `.gradsight/runs/<script>-<yyyymmdd-hhmmss>.db`, like `gradsight trace` names it. */
export function defaultStore(program: string, now: Date): string {
    const stem = (program.split(/[\\/]/).pop() ?? 'run').replace(/\.py$/, '').replace(/\./g, '_');
    const p = (n: number) => String(n).padStart(2, '0');
    const stamp = `${now.getFullYear()}${p(now.getMonth() + 1)}${p(now.getDate())}-${p(now.getHours())}${p(now.getMinutes())}${p(now.getSeconds())}`;
    return `.gradsight/runs/${stem}-${stamp}.db`;
}
