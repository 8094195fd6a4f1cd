// The user's interpreter: the gradsight.interpreter setting, else the Python extension's, else python3.
import * as vscode from 'vscode';
import { Interpreter, resolveInterpreter } from './pure/config';

interface PythonApi {
    environments?: { getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined };
    settings?: { getExecutionDetails(resource?: vscode.Uri): { execCommand: string[] | undefined } };
}

async function fromPythonExtension(resource?: vscode.Uri): Promise<string[] | undefined> {
    const ext = vscode.extensions.getExtension<PythonApi>('ms-python.python');
    if (!ext) {
        return undefined;
    }
    try {
        const api = ext.isActive ? ext.exports : await ext.activate();
        const details = api.settings?.getExecutionDetails(resource)?.execCommand;
        if (details && details.length) {
            return details;
        }
        const env = api.environments?.getActiveEnvironmentPath(resource);
        return env?.path ? [env.path] : undefined;
    } catch {
        return undefined;
    }
}

export async function interpreter(resource?: vscode.Uri): Promise<Interpreter> {
    const folder = resource ? vscode.workspace.getWorkspaceFolder(resource) : vscode.workspace.workspaceFolders?.[0];
    const setting = vscode.workspace.getConfiguration('gradsight', resource).get<string>('interpreter');
    return resolveInterpreter(setting, setting ? undefined : await fromPythonExtension(resource), folder?.uri.fsPath);
}
