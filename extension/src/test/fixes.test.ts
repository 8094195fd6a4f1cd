import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { bestValidated, Increments, progressReport, ValidateResult, validationMessage } from '../pure/fixes';
import { fixNote, isVerdict, verdictText } from '../pure/protocol';

const RESULT: ValidateResult = {
    run: '/w/.gradsight/runs/train.db',
    fixes: [
        { fix: 'adaptive-default-lr', title: "Use the adaptive optimizer's usual learning rate", verdict: 'validated',
          summary: 'validated: no learning rate too high through step 58; loss 5.19 vs 5.25 at step 58',
          effect: 'no learning rate too high through step 58; loss 5.19 vs 5.25 at step 58' },
        { id: 'lower-lr', title: 'Lower the learning rate', verdict: 'did_not_help', summary: 'did not help: loss 5.87 vs 5.25 at step 58', effect: '' },
    ],
};

test('progress: percentages become increments, messages pass through, the end says nothing', () => {
    const inc = new Increments();
    assert.deepEqual(progressReport({ kind: 'begin', title: 'gradsight: validating fixes', message: 'the top 3 fixes for train.db', percentage: 0 }, inc),
        { message: 'the top 3 fixes for train.db' });
    assert.deepEqual(progressReport({ kind: 'report', message: '1/3 adaptive-default-lr validated (4 s)', percentage: 33 }, inc),
        { message: '1/3 adaptive-default-lr validated (4 s)', increment: 33 });
    assert.deepEqual(progressReport({ kind: 'report', percentage: 67 }, inc), { increment: 34 });
    assert.equal(progressReport({ kind: 'report', percentage: 50 }, inc), undefined); // never backwards
    assert.deepEqual(progressReport({ kind: 'report', message: 're-running', percentage: 250 }, inc), { message: 're-running', increment: 33 });
    assert.equal(progressReport({ kind: 'end', message: '1 validated' }, inc), undefined);
    assert.equal(new Increments().next(undefined), undefined);
    assert.equal(new Increments().next(Number.NaN), undefined);
});

test('the message at the end: how many work, each verdict with what the re-run measured', () => {
    const m = validationMessage(RESULT);
    assert.equal(m.level, 'info');
    assert.equal(m.text, "gradsight: 1 of 2 fixes validated. Use the adaptive optimizer's usual learning rate: validated " +
        '(no learning rate too high through step 58; loss 5.19 vs 5.25 at step 58); Lower the learning rate: did not help (loss 5.87 vs 5.25 at step 58)');
    assert.equal(bestValidated(RESULT)?.fix, 'adaptive-default-lr');
    const none = validationMessage({ fixes: [{ id: 'x', verdict: 'worse', summary: '' }] });
    assert.deepEqual(none, { level: 'warning', text: 'gradsight: none of 1 fix removed the fault. x: made it worse' });
    assert.equal(validationMessage({ fixes: [] }).level, 'warning');
    assert.equal(bestValidated({ fixes: [{ id: 'x', verdict: 'failed' }] }), undefined);
});

test("the panel's note beside a fix: the measured effect, or the expected one", () => {
    assert.equal(fixNote({ id: 'a', title: 'A', validated: { verdict: 'validated', summary: 'validated: gone', effect: 'loss 1.1 vs 8.7 at step 127' } }),
        'validated: loss 1.1 vs 8.7 at step 127');
    assert.equal(fixNote({ id: 'a', title: 'A', validated: { verdict: 'validated', summary: 'validated: no spike', effect: '' } }), 'validated: no spike');
    assert.equal(fixNote({ id: 'b', title: 'B', validated: { verdict: 'did_not_help', summary: 'did not help: loss 5.9 vs 5.2', effect: '' } }),
        'did not help: loss 5.9 vs 5.2');
    assert.equal(fixNote({ id: 'c', title: 'C', effect: 'the update ratio near 1e-3' }), 'expected: the update ratio near 1e-3 (not validated yet)');
    assert.equal(fixNote({ id: 'd', title: 'D' }), 'not validated yet');
    assert.equal(fixNote({ id: 'e', title: 'E', applied: true, hidden: true }), 'applied');
    assert.equal(fixNote({ id: 'e', title: 'E', applied: true, validated: { verdict: 'validated', summary: '', effect: 'x' } }), 'applied (validated)');
    assert.equal(verdictText('worse'), 'made it worse');
    assert.equal(verdictText('some_new_verdict'), 'some new verdict');
    assert.ok(isVerdict('failed') && !isVerdict('toString') && !isVerdict(3));
});
