// gradsight's VS Code extension: a thin client over the Python language server.
// Scaffold: the language client, decorations, tensor breakpoints and webviews
// come with the extension issue; this wires the output channel and settings.
import * as vscode from 'vscode';

let output: vscode.OutputChannel | undefined;

export function activate(context: vscode.ExtensionContext): void {
    output = vscode.window.createOutputChannel('gradsight');
    context.subscriptions.push(
        output,
        vscode.commands.registerCommand('gradsight.showOutput', () => output?.show()),
    );
}

export function deactivate(): void {
    output = undefined;
}
