// Tensor breakpoints: asked for and validated through the server, stored as ordinary VS Code breakpoints.
import * as vscode from 'vscode';
import { checkCondition, layerWatchCondition, looksLikeTensorCondition, parseGradsightCondition } from './pure/conditions';
import { Server } from './server';

interface Validation {
    ok: boolean;
    kind?: 'loop' | 'layer';
    condition?: string;
    scope?: string | null;
    debugCondition?: string | null;
    breakCondition?: string;
    message?: string;
    column?: number;
    watchId?: number;
    warning?: string;
}

export function breakpointCondition(v: Validation): string {
    return v.kind === 'layer' ? layerWatchCondition(v.condition ?? '', v.scope) : (v.debugCondition ?? checkCondition(v.condition ?? ''));
}

function describe(v: Validation): string {
    return `column ${v.column}: ${v.message}`;
}

export class TensorBreakpoints implements vscode.Disposable {
    private subscription: vscode.Disposable;

    constructor(private readonly server: Server, private readonly output: vscode.OutputChannel) {
        this.subscription = vscode.debug.onDidChangeBreakpoints((e) => void this.rewrite([...e.added, ...e.changed]));
    }

    /** Command: ask for a condition, validate it, add the breakpoint (from the palette or the gutter's context menu). */
    async add(arg?: { lineNumber?: number; uri?: vscode.Uri }): Promise<vscode.SourceBreakpoint | undefined> {
        const editor = vscode.window.activeTextEditor;
        const uri = arg?.uri ?? editor?.document.uri;
        const line = arg?.lineNumber !== undefined ? arg.lineNumber - 1 : editor?.selection.active.line;
        if (!uri || line === undefined) {
            void vscode.window.showErrorMessage('gradsight: open a Python file and put the cursor on a line first.');
            return undefined;
        }
        const condition = await vscode.window.showInputBox({
            title: 'gradsight: Add Tensor Breakpoint',
            prompt: 'Pause when this holds, e.g. grad_norm > 50, layer("encoder.*").dead_frac > 0.5, mean(loss, 10) > 3',
            placeHolder: 'grad_norm > 50',
            validateInput: async (text) => {
                if (!text.trim()) {
                    return 'type a condition';
                }
                const v = await this.server.command<Validation>('gradsight.validateCondition', { condition: text });
                return v && !v.ok ? describe(v) : undefined;
            },
        });
        if (!condition) {
            return undefined;
        }
        return this.place(uri, line, condition);
    }

    /** Validate on the line (a layer line becomes a scoped watch) and add the breakpoint. */
    async place(uri: vscode.Uri, line: number, condition: string): Promise<vscode.SourceBreakpoint | undefined> {
        const v = await this.server.command<Validation>('gradsight.validateCondition',
            { condition, uri: uri.toString(), line, install: true });
        if (!v) {
            void vscode.window.showErrorMessage('gradsight: the language server is not running (see gradsight: Show Output).');
            return undefined;
        }
        if (!v.ok) {
            void vscode.window.showErrorMessage(`gradsight: bad tensor condition: ${describe(v)}`);
            return undefined;
        }
        if (v.warning) {
            this.output.appendLine(v.warning);
        }
        const bp = new vscode.SourceBreakpoint(new vscode.Location(uri, new vscode.Position(line, 0)), true, breakpointCondition(v));
        vscode.debug.addBreakpoints([bp]);
        const where = v.kind === 'layer' ? `a watch on ${v.scope ?? 'this layer'}` : 'a conditional breakpoint';
        this.output.appendLine(`tensor breakpoint ${JSON.stringify(v.condition)} at ${uri.fsPath}:${line + 1}: ${where}`);
        return bp;
    }

    /** Conditions typed by hand in VS Code's own breakpoint UI (`grad_norm > 50`) become gradsight's. */
    private async rewrite(changed: readonly vscode.Breakpoint[]): Promise<void> {
        for (const bp of changed) {
            if (!(bp instanceof vscode.SourceBreakpoint) || !looksLikeTensorCondition(bp.condition)) {
                continue;
            }
            const { uri, range } = bp.location;
            const v = await this.server.command<Validation>('gradsight.validateCondition',
                { condition: bp.condition, uri: uri.toString(), line: range.start.line, install: true });
            if (!v) {
                continue;
            }
            if (!v.ok) {
                void vscode.window.showWarningMessage(`gradsight: the breakpoint condition ${JSON.stringify(bp.condition)} is not a valid tensor condition: ${describe(v)}`);
                continue;
            }
            vscode.debug.removeBreakpoints([bp]);
            vscode.debug.addBreakpoints([new vscode.SourceBreakpoint(bp.location, bp.enabled, breakpointCondition(v), bp.hitCondition, bp.logMessage)]);
        }
    }

    /** `--break` conditions for the watches on layer lines, re-scoped by the server for the current source. */
    async launchWatches(): Promise<string[]> {
        const out: string[] = [];
        for (const bp of vscode.debug.breakpoints) {
            if (!(bp instanceof vscode.SourceBreakpoint) || !bp.enabled) {
                continue;
            }
            const g = parseGradsightCondition(bp.condition);
            if (!g || g.kind !== 'layer') {
                continue;
            }
            const v = await this.server.command<Validation>('gradsight.validateCondition',
                { condition: g.expression, uri: bp.location.uri.toString(), line: bp.location.range.start.line });
            if (v?.ok && v.breakCondition) {
                out.push(v.breakCondition);
            } else if (v && !v.ok) {
                this.output.appendLine(`skipping the watch at ${bp.location.uri.fsPath}:${bp.location.range.start.line + 1}: ${describe(v)}`);
            }
        }
        return out;
    }

    dispose(): void {
        this.subscription.dispose();
    }
}
