// "gradsight: Validate Fixes": the server's gradsight.validate (a re-run of the script with each of the best fixes, by
// `gradsight validate`) inside VS Code's progress notification, cancellable, then the verdicts in a message.
import * as vscode from 'vscode';
import { bestValidated, fixId, Increments, progressReport, ValidateResult, validationMessage } from './pure/fixes';
import { Server } from './server';

export interface ValidateArgs { run?: string; top?: number; fix?: string }
export interface ValidateHooks { started?: () => void; ended?: (result: ValidateResult | undefined) => void }

let running: Promise<ValidateResult | undefined> | undefined;

export function validateFixes(srv: Server, arg: ValidateArgs | undefined, hooks: ValidateHooks = {}): Promise<ValidateResult | undefined> {
    running ??= run(srv, clean(arg), hooks).finally(() => { running = undefined; });
    return running;
}

function clean(arg: ValidateArgs | undefined): ValidateArgs {
    const out: ValidateArgs = {};
    if (arg && typeof arg.run === 'string' && arg.run) {
        out.run = arg.run;
    }
    if (arg && typeof arg.top === 'number' && Number.isInteger(arg.top) && arg.top > 0) {
        out.top = arg.top;
    }
    if (arg && typeof arg.fix === 'string' && arg.fix) {
        out.fix = arg.fix;
    }
    return out;
}

async function run(srv: Server, arg: ValidateArgs, hooks: ValidateHooks): Promise<ValidateResult | undefined> {
    hooks.started?.();
    let result: ValidateResult | undefined;
    let failure: string | undefined;
    let cancelled = false;
    await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: 'gradsight: validating fixes', cancellable: true },
        async (progress, token) => {
            progress.report({ message: 'starting the re-runs...' });
            const inc = new Increments();
            const cancel = token.onCancellationRequested(() => {
                cancelled = true;
                void srv.command('gradsight.cancelValidate', arg.run ? { run: arg.run } : {}).catch(() => undefined);
            });
            try {
                result = await srv.commandWithProgress<ValidateResult>('gradsight.validate', [arg], (v) => {
                    const r = progressReport(v, inc);
                    if (r) {
                        progress.report(r);
                    }
                });
            } catch (e) {
                failure = e instanceof Error ? e.message : String(e);
            } finally {
                cancel.dispose();
            }
        });
    hooks.ended?.(result);
    if (cancelled) {
        void vscode.window.showInformationMessage('gradsight: the validation of the fixes was cancelled.');
        return undefined;
    }
    if (failure !== undefined) {
        void vscode.window.showErrorMessage(`gradsight: ${failure}`);
        return undefined;
    }
    if (!result) {
        void vscode.window.showErrorMessage('gradsight: the language server is not running (see gradsight: Show Output).');
        return undefined;
    }
    void report(srv, result);
    return result;
}

async function report(srv: Server, result: ValidateResult): Promise<void> {
    const msg = validationMessage(result);
    const best = bestValidated(result);
    const apply = best ? 'Apply the Validated Fix' : undefined;
    const show = msg.level === 'info' ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
    const pick = await show(msg.text, ...(apply ? [apply] : []));
    if (pick === apply && best) {
        try {
            const r = await srv.command<{ applied: boolean; reason?: string }>('gradsight.applyFix', { id: fixId(best) });
            if (r && !r.applied) {
                void vscode.window.showErrorMessage(`gradsight: the fix was not applied${r.reason ? `: ${r.reason}` : ''}`);
            }
        } catch (e) {
            void vscode.window.showErrorMessage(`gradsight: ${e instanceof Error ? e.message : String(e)}`);
        }
    }
}
