import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { defaultStore, LaunchError, resolveInterpreter, toDebugpyLaunch, traceArgs } from '../pure/config';

test('interpreter: the setting, else the Python extension, else python3', () => {
    assert.deepEqual(resolveInterpreter('${workspaceFolder}/.venv/bin/python', ['/usr/bin/python3.11'], '/w'),
        { command: ['/w/.venv/bin/python'], source: 'setting' });
    assert.deepEqual(resolveInterpreter('  ', ['/opt/conda/bin/python', '-X', 'dev'], '/w'),
        { command: ['/opt/conda/bin/python', '-X', 'dev'], source: 'python-extension' });
    assert.deepEqual(resolveInterpreter(undefined, undefined), { command: ['python3'], source: 'default' });
    assert.deepEqual(resolveInterpreter('', [''], '/w'), { command: ['python3'], source: 'default' });
});

const base = { type: 'gradsight', request: 'launch', name: 'n', program: '/w/train.py', cwd: '/w' };

test('trace arguments carry the store, triggers, breaks and the script arguments after --', () => {
    assert.deepEqual(traceArgs({ ...base, args: ['--epochs', '3'], triggers: 'nan_inf', every: 10, breaks: ['loss > 9'] },
        ['layer("fc1").grad_norm > 50'], '.gradsight/runs/train.db'),
    ['trace', '/w/train.py', '--output', '.gradsight/runs/train.db', '--trigger', 'nan_inf', '--every', '10',
        '--break', 'loss > 9', '--break', 'layer("fc1").grad_norm > 50', '--', '--epochs', '3']);
    assert.throws(() => traceArgs({ ...base, program: undefined }, [], 'x.db'), LaunchError);
    assert.throws(() => traceArgs({ ...base, every: 0 }, [], 'x.db'), /positive whole number/);
});

test('the debugpy launch runs gradsight as a module in the chosen interpreter', () => {
    const l = toDebugpyLaunch({ ...base, output: 'run.db' }, ['/venv/bin/python'], [], 'default.db');
    assert.equal(l.module, 'gradsight');
    assert.deepEqual(l.python, ['/venv/bin/python']);
    assert.equal(l.program, undefined);
    assert.deepEqual(l.args, ['trace', '/w/train.py', '--output', 'run.db', '--']);
    assert.equal(l.justMyCode, true);
    // gradsight's own frames are library code for debugpy (never in the Call Stack), after any rules of the user's
    const ours = [{ module: 'gradsight', include: false }, { path: '**/gradsight/__main__.py', include: false }];
    assert.deepEqual(l.rules, ours);
    assert.deepEqual(toDebugpyLaunch({ ...base, rules: [{ path: '/w/vendor', include: false }] }, ['py'], [], 'd.db').rules,
        [{ path: '/w/vendor', include: false }, ...ours]);
    assert.deepEqual(toDebugpyLaunch({ ...base, python: '/other/python' }, ['/venv/bin/python'], [], 'd.db').python, ['/other/python']);
});

test('default store names follow gradsight trace', () => {
    assert.equal(defaultStore('/w/my.train.py', new Date(2026, 10, 29, 9, 5, 7)), '.gradsight/runs/my_train-20261129-090507.db');
});
