import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatNumber, HealthModel, HealthNotification, HealthRecord, statusText } from '../pure/health';

const rec = (line: number, module: string, health: number, severity: string, uri = 'file:///w/model.py'): HealthRecord =>
    ({ uri, line, module, health, severity, summary: `health ${health}`, instances: 1 });

const note = (run: string, records: HealthRecord[], step = 10): HealthNotification =>
    ({ run, step, state: { run, step, status: 'running', loss: 0.5, anomalies: 0 }, records });

test('decorations group by severity, one per line, the worst record wins', () => {
    const m = new HealthModel();
    m.update(note('/r/1.db', [rec(3, 'a.0.fc', 90, 'ok'), rec(3, 'a.1.fc', 20, 'error'), rec(7, 'head', 60, 'warning'),
        rec(1, 'x', 50, 'nonsense'), rec(2, 'other', 10, 'error', 'file:///w/train.py')]));
    const d = m.decorations('file:///w/model.py');
    assert.deepEqual(d.get('error')!.map((x) => [x.line, x.text]), [[3, 'health 20']]);
    assert.deepEqual(d.get('warning')!.map((x) => x.line), [7]);
    assert.deepEqual(d.get('ok'), []);
    assert.deepEqual(d.get('info')!.map((x) => x.line), [1]); // unknown severities show as info
    assert.match(d.get('error')![0].hover, /a\.1\.fc/);
    assert.deepEqual(m.decorations('file:///w/none.py').get('error'), []);
});

test('a new run is reported (so old decorations are cleared); the same run is not', () => {
    const m = new HealthModel();
    assert.equal(m.update(note('/r/1.db', [rec(3, 'fc', 20, 'error')])), true);
    assert.equal(m.update(note('/r/1.db', [rec(3, 'fc', 25, 'error')], 11)), false);
    assert.equal(m.update(note('/r/2.db', [])), true);
    assert.deepEqual(m.records('file:///w/model.py'), []);
    assert.equal(m.state.run, '/r/2.db');
});

test('status text says step, loss and anomalies', () => {
    assert.equal(statusText({ run: null }), '$(pulse) gradsight: no run');
    assert.equal(statusText({ run: '/r.db', step: 59, loss: 0.4213, anomalies: 2, status: 'finished' }), '$(warning) gradsight step 59 · loss 0.4213 · 2 anomalies');
    assert.equal(statusText({ run: '/r.db', step: 3, loss: null, anomalies: 1, status: 'running' }), '$(sync~spin) gradsight step 3 · 1 anomaly');
    assert.equal(statusText({ run: '/r.db', error: 'bad' }), '$(warning) gradsight: run unreadable');
    assert.equal(statusText({ run: '/r.db', error: 'r.db: nothing to diagnose: it is still being written and has no step yet' }),
        '$(sync~spin) gradsight: waiting for the first step');
    assert.equal(statusText({ run: '/r.db', step: 420, loss: 1.5, anomalies: 0, status: 'running', slowdown: 2.61, overhead: 'x' }),
        '$(sync~spin) gradsight step 420 · loss 1.5 · 0 anomalies · gradsight 2.6x slower');
    assert.equal(formatNumber(8.196e6), '8.20e+6');
    assert.equal(formatNumber(NaN), 'NaN');
});
