// The status-bar item: the run's state (step, loss, anomalies); a click opens a run.
import * as vscode from 'vscode';
import { RunState, statusText } from './pure/health';

export class Status implements vscode.Disposable {
    private item = vscode.window.createStatusBarItem('gradsight.run', vscode.StatusBarAlignment.Left, 50);

    constructor() {
        this.item.name = 'gradsight run';
        this.item.command = 'gradsight.chooseRun';
        this.show({ run: null });
    }

    show(state: RunState): void {
        this.item.text = statusText(state);
        this.item.tooltip = state.run
            ? `gradsight: ${state.run}\n${state.status ?? ''}${state.health != null ? ` · model health ${state.health}/100` : ''}\n`
              + `${state.overhead ? `${state.overhead}\n` : ''}Click to open another run`
            : 'gradsight: no run yet. Trace a script (F5 with a gradsight configuration, or gradsight trace train.py)';
        this.item.show();
    }

    dispose(): void {
        this.item.dispose();
    }
}
