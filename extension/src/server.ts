// Starts `python -m gradsight serve` with the user's interpreter and keeps one language client.
import { execFile } from 'child_process';
import { randomUUID } from 'crypto';
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions as LspServerOptions, WorkDoneProgress } from 'vscode-languageclient/node';
import { ProgressValue } from './pure/fixes';
import { interpreter } from './python';
import { serverOptions } from './settings';

export type Listener = (client: LanguageClient) => void;

export class Server implements vscode.Disposable {
    client: LanguageClient | undefined;
    private starting: Promise<LanguageClient | undefined> | undefined;
    private listeners: Listener[] = [];
    private failed = false; // until a restart: no new attempt on every request

    constructor(private readonly output: vscode.OutputChannel) {}

    /** Called with every new client (after a restart too), before it starts. */
    onClient(listener: Listener): void {
        this.listeners.push(listener);
    }

    async ready(): Promise<LanguageClient | undefined> {
        if (this.client) {
            return this.client;
        }
        if (this.failed) {
            return undefined;
        }
        this.starting ??= this.start().finally(() => { this.starting = undefined; });
        return this.starting;
    }

    async restart(): Promise<void> {
        await this.stop();
        this.failed = false;
        await this.ready();
    }

    async stop(): Promise<void> {
        const c = this.client;
        this.client = undefined;
        if (c) {
            try {
                await c.stop();
            } catch (e) {
                this.output.appendLine(`stopping the server: ${e}`);
            }
        }
    }

    private async start(): Promise<LanguageClient | undefined> {
        const py = await interpreter(vscode.workspace.workspaceFolders?.[0]?.uri);
        const [command, ...pre] = py.command;
        this.output.appendLine(`interpreter: ${py.command.join(' ')} (from ${py.source})`);
        const missing = await importError(command, pre);
        if (missing) {
            this.output.appendLine(missing);
            const install = `${py.command.map(quote).join(' ')} -m pip install gradsight`;
            const pick = await vscode.window.showErrorMessage(
                `gradsight is not installed in ${py.command.join(' ')}. Install it with: ${install}` +
                ' (or set gradsight.interpreter to a Python that has it).',
                'Copy Install Command', 'Open Settings');
            this.failed = true;
            if (pick === 'Copy Install Command') {
                await vscode.env.clipboard.writeText(install);
            } else if (pick === 'Open Settings') {
                await vscode.commands.executeCommand('workbench.action.openSettings', 'gradsight.interpreter');
            }
            return undefined;
        }
        const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
        const run: LspServerOptions = { command, args: [...pre, '-m', 'gradsight', 'serve'], options: { cwd } };
        const options: LanguageClientOptions = {
            documentSelector: [{ scheme: 'file', language: 'python' }],
            outputChannel: this.output,
            initializationOptions: serverOptions(),
            markdown: { isTrusted: { enabledCommands: ['gradsight.showHeatmap', 'gradsight.showSandbox', 'gradsight.applyFix'] }, supportHtml: false },
            middleware: {
                // the server's "Validate fixes" lens runs its LSP command; here it runs the extension's, which shows
                // VS Code's progress notification (and can be cancelled) around that command
                provideCodeLenses: async (document, token, next) => {
                    const lenses = await next(document, token);
                    for (const lens of lenses ?? []) {
                        if (lens.command?.command === 'gradsight.validate') {
                            lens.command = { ...lens.command, command: 'gradsight.validateFixes' };
                        }
                    }
                    return lenses;
                },
            },
        };
        const client = new LanguageClient('gradsight', 'gradsight', run, options);
        for (const l of this.listeners) {
            l(client);
        }
        try {
            await client.start();
        } catch (e) {
            this.output.appendLine(`the gradsight language server did not start: ${e}`);
            await client.dispose().catch(() => undefined);
            this.failed = true;
            return undefined;
        }
        this.client = client;
        this.output.appendLine('gradsight language server started');
        return client;
    }

    /** Tell the running server about changed settings (runs folder, store, thresholds). */
    async configure(): Promise<void> {
        await this.client?.sendNotification('workspace/didChangeConfiguration', { settings: { gradsight: serverOptions() } });
    }

    async command<T>(name: string, ...args: unknown[]): Promise<T | undefined> {
        const c = await this.ready();
        if (!c) {
            return undefined;
        }
        return c.sendRequest<T>('workspace/executeCommand', { command: name, arguments: args });
    }

    /** A server command with work-done progress on a token of this client: `onProgress` gets each `$/progress` value. */
    async commandWithProgress<T>(name: string, args: unknown[], onProgress: (v: ProgressValue) => void): Promise<T | undefined> {
        const c = await this.ready();
        if (!c) {
            return undefined;
        }
        const token = `gradsight-${randomUUID()}`;
        const sub = c.onProgress(WorkDoneProgress.type, token, (v) => onProgress(v as ProgressValue));
        try {
            return await c.sendRequest<T>('workspace/executeCommand', { command: name, arguments: args, workDoneToken: token });
        } finally {
            sub.dispose();
        }
    }

    dispose(): void {
        void this.stop();
    }
}

function quote(s: string): string {
    return /^[\w./:@-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Why `import gradsight.server` fails in this interpreter, or undefined when it works. */
function importError(command: string, pre: string[]): Promise<string | undefined> {
    return new Promise((resolve) => {
        execFile(command, [...pre, '-c', 'import gradsight.server'], { timeout: 30000 }, (err, _out, stderr) => {
            resolve(err ? `cannot import gradsight with ${command}: ${stderr || err.message}` : undefined);
        });
    });
}
