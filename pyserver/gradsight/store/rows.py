"""The rows the runtime writes, typed: the store owns every statement that writes them."""

from __future__ import annotations

from dataclasses import astuple, dataclass, fields


@dataclass(frozen=True)
class StepRow:
    step: int
    time: float  # wall clock (time.time())
    duration: float | None  # seconds since the previous step
    loss: float | None
    lr: float | None
    grad_norm: float | None  # before clipping
    grad_max: float | None
    sampled: bool
    n_backward: int
    grads_zeroed: int | None
    capture: bool
    loss_finite: int | None
    skipped: bool = False
    clip_norm: float | None = None
    grad_norm_clipped: float | None = None
    amp_scale: float | None = None
    clip_value: float | None = None


@dataclass(frozen=True)
class ModuleRow:
    id: int
    name: str
    type: str
    type_module: str
    parent: str | None
    n_params: int
    own_params: int
    forward_order: int | None
    file: str | None
    line: int | None
    owner: str | None
    attr: str | None
    model: str = ""
    site: str | None = None  # the creating call, as scope|callee|index in file (pysource.CallSite.key)
    label: str | None = None  # a readable name: model[2]
    config: str | None = None  # JSON


@dataclass(frozen=True)
class ParamRow:
    id: int
    name: str
    module_id: int
    shape: str
    numel: int
    trainable: bool
    in_optimizer: bool
    got_grad: bool = False


def _columns(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def insert_sql(table: str, cls: type) -> str:
    cols = _columns(cls)
    return f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})"


def values(row: object) -> tuple[object, ...]:
    return tuple(int(v) if isinstance(v, bool) else v for v in astuple(row))  # type: ignore[call-overload]
