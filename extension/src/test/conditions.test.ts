import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkCondition, layerWatchCondition, looksLikeTensorCondition, parseGradsightCondition } from '../pure/conditions';

test('check conditions round-trip, quotes and backslashes included', () => {
    for (const expr of ['grad_norm > 50', 'layer("encoder.*").dead_frac > 0.5', "layer('fc1').grad_norm > 1 and loss > 2", 'a \\ b']) {
        const cond = checkCondition(expr);
        assert.match(cond, /^__import__\('gradsight'\)\.check\(/);
        assert.deepEqual(parseGradsightCondition(cond), { kind: 'check', expression: expr, scope: undefined });
    }
});

test('layer watches keep their scope', () => {
    const cond = layerWatchCondition('grad_norm > 50', 'encoder.layer.*.attention.self.query');
    assert.equal(cond, `__import__('gradsight').layer_watch("grad_norm > 50", "encoder.layer.*.attention.self.query")`);
    assert.deepEqual(parseGradsightCondition(cond), { kind: 'layer', expression: 'grad_norm > 50', scope: 'encoder.layer.*.attention.self.query' });
    assert.deepEqual(parseGradsightCondition(layerWatchCondition('act_max > 1e4', null)), { kind: 'layer', expression: 'act_max > 1e4', scope: undefined });
});

test('Python single-quoted arguments are read too', () => {
    assert.deepEqual(parseGradsightCondition(`__import__('gradsight').check('grad_norm > 50')`),
        { kind: 'check', expression: 'grad_norm > 50', scope: undefined });
    assert.deepEqual(parseGradsightCondition(`__import__("gradsight").check('layer("x").grad_max > 1')`),
        { kind: 'check', expression: 'layer("x").grad_max > 1', scope: undefined });
});

test('other conditions are not gradsight calls', () => {
    for (const c of [undefined, '', 'x > 5', `__import__('gradsight').check(expr)`, `__import__('os').system("rm")`,
        `__import__('gradsight').check("a") or True`, `__import__('gradsight').check("a", "b", "c")`]) {
        assert.equal(parseGradsightCondition(c), undefined, String(c));
    }
});

test('hand-typed tensor conditions are recognised, plain Python ones left alone', () => {
    for (const c of ['grad_norm > 50', 'dead_frac>0.3', 'layer("fc1").update_ratio > 0.1', 'mean(grad_max, 5) > 2', 'not nan_count == 0']) {
        assert.ok(looksLikeTensorCondition(c), c);
    }
    for (const c of ['loss > 10', 'step == 30', 'i % 100 == 0', 'self.grad_norm > 5', 'name == "grad_norm"', checkCondition('grad_norm > 50'),
        layerWatchCondition('grad_norm > 1', 'fc1'), undefined]) {
        assert.ok(!looksLikeTensorCondition(c), String(c));
    }
});
