"""The condition language: parsed with a whitelist, never eval-ed; errors name the column."""

from __future__ import annotations

import pytest

from gradsight.conditions import ConditionError, parse


class Ctx:
    def __init__(self, steps: list[dict[tuple[str, str | None], float]]) -> None:
        self.steps = steps

    def value(self, metric: str, module: str | None) -> float | None:
        return self.steps[-1].get((metric, module))

    def history(self, metric: str, module: str | None, n: int) -> list[float]:
        return [s[(metric, module)] for s in self.steps[-n:] if (metric, module) in s]


def test_comparison_arithmetic_and_logic() -> None:
    ctx = Ctx([{("grad_norm", None): 60.0, ("loss", None): 2.0, ("step", None): 7}])
    assert parse("grad_norm > 50").evaluate(ctx)
    assert not parse("grad_norm > 50 and loss > 3").evaluate(ctx)
    assert parse("grad_norm / 2 >= 30 or loss > 3").evaluate(ctx)
    assert parse("not loss > 3").evaluate(ctx)
    assert parse("10 < grad_norm < 100").evaluate(ctx)
    assert parse("abs(-loss) == 2 and step % 7 == 0").evaluate(ctx)


def test_layer_scope_and_glob() -> None:
    ctx = Ctx([{("grad_norm", "enc.0.q"): 10.0, ("grad_norm", "enc.1.q"): 80.0}])
    assert parse('layer("enc.1.q").grad_norm > 50').evaluate(ctx)
    assert not parse('layer("enc.0.q").grad_norm > 50').evaluate(ctx)
    cond = parse('layer("enc.*.q").grad_norm > 50')
    assert cond.matches(ctx, ["enc.0.q", "enc.1.q", "enc.1.k"]) == ["enc.1.q"]
    # the implicit scope of a watch set on a layer's line
    assert parse("grad_norm > 50").evaluate(ctx, scope="enc.1.q")
    assert not parse("grad_norm > 50").evaluate(ctx, scope="enc.0.q")


def test_window_functions() -> None:
    steps = [{("loss", None): v} for v in (1.0, 1.0, 1.0, 1.0, 9.0)]
    ctx = Ctx(steps)
    assert parse("loss > 3 * mean(loss, 5)").evaluate(ctx)  # 9 > 3 * 2.6
    assert not parse("loss > 4 * mean(loss, 5)").evaluate(ctx)  # 9 < 4 * 2.6
    assert parse("max(loss, 3) == 9 and min(loss, 3) == 1").evaluate(ctx)


def test_unknown_values_do_not_fire() -> None:
    ctx = Ctx([{("loss", None): 1.0}])
    assert not parse("act_max > 5").evaluate(ctx)
    assert not parse("not act_max > 5").evaluate(ctx)
    assert parse("act_max > 5 or loss < 2").evaluate(ctx)


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ("gradnorm > 50", 1, "unknown name 'gradnorm'"),
        ("grad_norm > ", 12, "ends too early"),
        ('layer("fc1").grad_nrm > 1', 14, "unknown layer metric 'grad_nrm'"),
        ("loss > 3 and __import__('os').system('x')", 14, "may be called"),
        ("loss > 3 and __import__('os')", 14, "unknown function '__import__'"),
        ("mean(loss, n) > 1", 12, "whole number"),
        ("loss.real > 1", 1, "only allowed on layer"),
        ("[loss] > 1", 1, "unsupported syntax"),
        ("loss > 'a'", 8, "expected a number"),
        ("lambda: 1", 1, "unsupported syntax"),
        ("", 1, "empty condition"),
    ],
)
def test_errors_name_the_column(text: str, column: int, fragment: str) -> None:
    with pytest.raises(ConditionError) as info:
        parse(text)
    assert info.value.column == column, str(info.value)
    assert fragment in str(info.value)
    assert f"column {column}:" in str(info.value)


def test_never_evaluates_python() -> None:
    for text in ("__import__('os').getcwd() == 1", "open('/etc/passwd')", "().__class__", "x if loss else y"):
        with pytest.raises(ConditionError):
            parse(text)
