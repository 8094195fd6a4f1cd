import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { recategorize } from '../pure/console';
import { whose } from '../pure/health';
import { isView, RunInfo, runTitle } from '../pure/protocol';
import { color, columnOf, entropy, extent, fmt, intSplits, logSplits, rgb, ticks, transform, unit } from '../pure/scale';

test("gradsight's own stderr lines become information; the user's stay stderr", () => {
    const out = recategorize({ category: 'stderr', output: 'gradsight: anomaly at step 30: grad_explode\nTraceback (most recent call last):\n  x\ngradsight: 60 steps\n' });
    assert.deepEqual(out.map((o) => [o.category, o.output]), [
        ['stdout', 'gradsight: anomaly at step 30: grad_explode\n'],
        ['stderr', 'Traceback (most recent call last):\n  x\n'],
        ['stdout', 'gradsight: 60 steps\n'],
    ]);
    assert.deepEqual(recategorize({ category: 'stderr', output: 'warning: x\n' }), [{ category: 'stderr', output: 'warning: x\n' }]);
    assert.deepEqual(recategorize({ category: 'stdout', output: 'gradsight: y\n' }), [{ category: 'stdout', output: 'gradsight: y\n' }]);
    assert.equal(recategorize({ category: 'stderr', output: '\rgradsight: step 3 · loss 0.5' })[0].category, 'stdout');
    assert.equal(recategorize({ category: 'stderr', output: 'my gradsight-free error\n' })[0].category, 'stderr');
});

test('colour scales: log and linear transforms, clamped units, palette ends', () => {
    assert.equal(transform(100, 'log'), 2);
    assert.equal(transform(0, 'log'), null);
    assert.equal(transform(null, 'linear'), null);
    assert.equal(transform(-3, 'linear'), -3);
    assert.equal(unit(5, [0, 10]), 0.5);
    assert.equal(unit(50, [0, 10]), 1);
    assert.deepEqual(rgb(0, 'magma'), [0, 0, 4]);
    assert.deepEqual(rgb(1, 'viridis'), [253, 231, 37]);
    assert.equal(color(Number.NaN), 'rgb(0,0,4)');
    const [lo, hi] = extent([[1, 10, null], [100, 1000, 0]], 'log');
    assert.ok(lo >= 0 && hi <= 3 && hi > lo);
    assert.deepEqual(extent([[null]], 'log'), [0, 1]);
});

test('the column of a step: exact, inside a bucket, between buckets', () => {
    const steps = [0, 10, 20, 30];
    const until = [9, 19, 29, 39];
    assert.equal(columnOf(0, steps, until), 0);
    assert.equal(columnOf(15, steps, until), 1);
    assert.equal(columnOf(39, steps, until), 3);
    assert.equal(columnOf(-5, steps, until), 0);
    assert.equal(columnOf(500, steps, until), 3);
    assert.equal(columnOf(7, [0, 10], [0, 10]), 1); // sparse steps: the nearer one
    assert.equal(columnOf(3, [0, 10], [0, 10]), 0);
    assert.equal(columnOf(3, [], []), -1);
});

test('numbers, ticks and entropy', () => {
    assert.equal(fmt(0.5), '0.5');
    assert.equal(fmt(7.26e6), '7.26e+6');
    assert.equal(fmt(null), '-');
    assert.equal(fmt(Number.POSITIVE_INFINITY), 'Inf');
    assert.deepEqual(ticks(10, 4), [0, 3, 6, 9]);
    assert.deepEqual(ticks(3, 10), [0, 1, 2]);
    assert.ok(Math.abs(entropy([0.5, 0.5]) - Math.log(2)) < 1e-12);
    assert.equal(entropy([1, 0, null]), 0);
});

test('a panel says which run it shows', () => {
    const run: RunInfo = { path: '/w/.gradsight/runs/b.db', name: 'b.db', script: '/w/second.py', status: 'finished', started: 1, step: 39,
        model: 'Sequential', health: 12, anomaly: { step: 20, trigger: 'grad_explode' }, rootCause: null, error: null };
    assert.equal(runTitle(run), 'b.db · second.py · finished · step 39 · model health 12 · grad_explode at step 20');
    assert.ok(isView('attention') && !isView('pie'));
});

test("a line's record says whose health it is", () => {
    const r = { uri: 'u', line: 1, module: '2', health: 3, severity: 'error', summary: 's' };
    assert.equal(whose({ ...r, label: 'model[2]' }), ' (model[2])');
    assert.equal(whose({ ...r, label: 'model[2]', layers: 3 }), ' (worst of 3 layers on this line: model[2])');
    assert.equal(whose({ ...r, instances: 12 }), ' (worst of 12 instances: 2)');
    assert.equal(whose({ ...r, module: '', label: 'model', model: true }), ' (the model)');
    assert.equal(whose({ ...r, module: '', label: 'net', model: true }), ' (the model, net)');
});

test('axis ticks: decades or 1-2-5 on log axes, round whole numbers for steps', () => {
    assert.deepEqual(logSplits(0.5, 5e3), [1, 10, 100, 1000]);
    assert.deepEqual(logSplits(2.4e6, 6.2e7), [3e6, 1e7, 3e7]);
    assert.deepEqual(logSplits(3, 40), [3, 10, 30]);
    assert.deepEqual(logSplits(3, 9), [5]);
    assert.deepEqual(logSplits(0, 10), []);
    assert.deepEqual(intSplits(13.5, 20.5, 600), [14, 15, 16, 17, 18, 19, 20]);
    assert.deepEqual(intSplits(-0.5, 1999.5, 600), [0, 200, 400, 600, 800, 1000, 1200, 1400, 1600, 1800]);
    assert.ok(intSplits(-0.5, 59.5, 300).every((v) => Number.isInteger(v)));
});
