// gradsight's settings, as the language server wants them.
import * as vscode from 'vscode';

export interface ServerOptions {
    runsFolder: string;
    store: string | null;
    thresholds: Record<string, number>;
    inlayHints: boolean;
}

export function serverOptions(): ServerOptions {
    const c = vscode.workspace.getConfiguration('gradsight');
    return {
        runsFolder: c.get<string>('runsFolder') || '.gradsight/runs',
        store: c.get<string>('store') || null,
        thresholds: c.get<Record<string, number>>('thresholds') ?? {},
        inlayHints: c.get<boolean>('inlayHints.enabled') ?? false,
    };
}

export function decorationsEnabled(): boolean {
    return vscode.workspace.getConfiguration('gradsight').get<boolean>('decorations.enabled') ?? true;
}

/** Settings whose change needs a new server (the interpreter) rather than a configuration message. */
export function needsRestart(e: vscode.ConfigurationChangeEvent): boolean {
    return e.affectsConfiguration('gradsight.interpreter') || e.affectsConfiguration('python.defaultInterpreterPath');
}
