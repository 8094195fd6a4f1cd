// The `gradsight` debug type: debugpy's own adapter, launching `python -m gradsight trace ...`.
import * as vscode from 'vscode';
import { RelayAdapter } from './adapter';
import { TensorBreakpoints } from './breakpoints';
import { defaultStore, GradsightLaunch, LaunchError, toDebugpyLaunch } from './pure/config';
import { interpreter } from './python';

export const INITIAL: GradsightLaunch = {
    type: 'gradsight', request: 'launch', name: 'gradsight: trace current file', program: '${file}', cwd: '${workspaceFolder}',
};

export function registerDebug(context: vscode.ExtensionContext, breakpoints: TensorBreakpoints, output: vscode.OutputChannel): void {
    context.subscriptions.push(
        vscode.debug.registerDebugAdapterDescriptorFactory('gradsight', {
            async createDebugAdapterDescriptor(session) {
                const py = (session.configuration.python as string[] | undefined) ?? (await interpreter(session.workspaceFolder?.uri)).command;
                output.appendLine(`debug adapter: ${py.join(' ')} -m debugpy.adapter`);
                return new vscode.DebugAdapterInlineImplementation(new RelayAdapter(py[0], [...py.slice(1), '-m', 'debugpy.adapter'], output));
            },
        }),
        // no provideDebugConfigurations: package.json's initialConfigurations is what "create a launch.json file"
        // writes (a provider would add the same configuration a second time)
        vscode.debug.registerDebugConfigurationProvider('gradsight', {
            resolveDebugConfiguration(_folder, cfg) {
                if (!cfg.type && !cfg.request && !cfg.name) { // F5 with no launch.json
                    return vscode.window.activeTextEditor?.document.languageId === 'python' ? { ...INITIAL } : undefined;
                }
                return cfg;
            },
            async resolveDebugConfigurationWithSubstitutedVariables(folder, cfg) {
                const launch = cfg as GradsightLaunch;
                launch.cwd ||= folder?.uri.fsPath;
                const py = (await interpreter(folder?.uri)).command;
                const watches = await breakpoints.launchWatches();
                try {
                    const resolved = toDebugpyLaunch(launch, py, watches, defaultStore(launch.program ?? 'run', new Date()));
                    output.appendLine(`launch: ${[...(resolved.python as unknown as string[]), '-m', 'gradsight', ...(resolved.args ?? [])].join(' ')}`);
                    return resolved as vscode.DebugConfiguration;
                } catch (e) {
                    if (e instanceof LaunchError) {
                        void vscode.window.showErrorMessage(`gradsight: ${e.message}`);
                        return undefined;
                    }
                    throw e;
                }
            },
        }),
    );
}
