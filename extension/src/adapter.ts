// The `gradsight` debug type's adapter: debugpy's own (`python -m debugpy.adapter`), behind a thin relay that
// shows gradsight's own Debug Console lines as information rather than errors (pure/console.ts). Every other
// message passes through unchanged.
import { ChildProcess, spawn } from 'child_process';
import * as vscode from 'vscode';
import { OutputBody, recategorize } from './pure/console';

interface Message { type: string; event?: string; body?: unknown; [key: string]: unknown }

export class RelayAdapter implements vscode.DebugAdapter {
    private readonly emitter = new vscode.EventEmitter<vscode.DebugProtocolMessage>();
    readonly onDidSendMessage = this.emitter.event;
    private readonly child: ChildProcess;
    private buffer = Buffer.alloc(0);

    constructor(command: string, args: string[], output: vscode.OutputChannel) {
        this.child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
        this.child.stdout?.on('data', (d: Buffer) => this.receive(d));
        this.child.stderr?.on('data', (d: Buffer) => output.append(`debugpy adapter: ${d.toString()}`));
        this.child.on('exit', (code) => {
            output.appendLine(`debugpy adapter exited (${code})`);
            this.emitter.fire({ type: 'event', event: 'terminated', seq: 0 } as vscode.DebugProtocolMessage);
        });
    }

    handleMessage(message: vscode.DebugProtocolMessage): void {
        const body = Buffer.from(JSON.stringify(message), 'utf8');
        this.child.stdin?.write(`Content-Length: ${body.length}\r\n\r\n`);
        this.child.stdin?.write(body);
    }

    private receive(data: Buffer): void {
        this.buffer = Buffer.concat([this.buffer, data]);
        for (;;) {
            const end = this.buffer.indexOf('\r\n\r\n');
            if (end < 0) {
                return;
            }
            const header = /Content-Length:\s*(\d+)/i.exec(this.buffer.subarray(0, end).toString('ascii'));
            if (!header) {
                this.buffer = this.buffer.subarray(end + 4);
                continue;
            }
            const length = Number(header[1]);
            if (this.buffer.length < end + 4 + length) {
                return;
            }
            const text = this.buffer.subarray(end + 4, end + 4 + length).toString('utf8');
            this.buffer = this.buffer.subarray(end + 4 + length);
            this.forward(JSON.parse(text) as Message);
        }
    }

    private forward(m: Message): void {
        if (m.type === 'event' && m.event === 'output' && m.body && typeof m.body === 'object') {
            for (const body of recategorize(m.body as OutputBody)) {
                this.emitter.fire({ ...m, body } as vscode.DebugProtocolMessage);
            }
            return;
        }
        this.emitter.fire(m as vscode.DebugProtocolMessage);
    }

    dispose(): void {
        this.child.kill();
        this.emitter.dispose();
    }
}
