// Gutter icons and after-line text from the server's gradsight/health records, per visible editor.
import * as path from 'path';
import * as vscode from 'vscode';
import { HealthModel, HealthNotification, SEVERITIES, Severity } from './pure/health';
import { decorationsEnabled } from './settings';

const COLORS: Record<Severity, string> = {
    ok: 'testing.iconPassed', info: 'editorInfo.foreground', warning: 'editorWarning.foreground', error: 'editorError.foreground',
};

export class Decorations implements vscode.Disposable {
    readonly model = new HealthModel();
    private types: Map<Severity, vscode.TextEditorDecorationType>;
    private subscriptions: vscode.Disposable[] = [];

    constructor(media: string) {
        this.types = new Map(SEVERITIES.map((s) => [s, vscode.window.createTextEditorDecorationType({
            gutterIconPath: path.join(media, `${s}.svg`),
            gutterIconSize: 'contain',
            after: { color: new vscode.ThemeColor(COLORS[s]), margin: '0 0 0 2em', fontStyle: 'italic' },
            rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
        })]));
        this.subscriptions.push(vscode.window.onDidChangeVisibleTextEditors(() => this.render()));
    }

    update(n: HealthNotification): void {
        if (this.model.update(n)) {
            this.clear(); // a new run: nothing of the old one stays on screen
        }
        this.render();
    }

    render(): void {
        for (const editor of vscode.window.visibleTextEditors) {
            const byType = decorationsEnabled() ? this.model.decorations(editor.document.uri.toString()) : undefined;
            for (const [severity, type] of this.types) {
                const lines = byType?.get(severity) ?? [];
                editor.setDecorations(type, lines.filter((d) => d.line < editor.document.lineCount).map((d) => {
                    const end = editor.document.lineAt(d.line).range.end;
                    return {
                        range: new vscode.Range(end, end),
                        hoverMessage: d.hover,
                        renderOptions: { after: { contentText: d.text } },
                    };
                }));
            }
        }
    }

    clear(): void {
        for (const editor of vscode.window.visibleTextEditors) {
            for (const type of this.types.values()) {
                editor.setDecorations(type, []);
            }
        }
    }

    dispose(): void {
        this.types.forEach((t) => t.dispose());
        this.subscriptions.forEach((s) => s.dispose());
    }
}
