"""A run store read into arrays, once, for the analysis (no torch)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..store import NEVER_STEPPED, DamagedStore, Event, ModuleInfo, Observation, RunStore, StoreError

# modules whose outputs are activations of a layer before them (no parameters of their own)
ACTIVATIONS = {"ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax",
               "Hardtanh", "Hardsigmoid", "Softsign", "Mish", "PReLU", "Threshold"}
SATURATING = {"Tanh", "Sigmoid", "Hardtanh", "Hardsigmoid", "Softsign"}
EMBEDDINGS = {"Embedding", "EmbeddingBag"}
CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}  # modules with no forward code of their own between their children
# optimizers that normalise the gradient's scale away (their step is ~lr whatever the gradient's size)
ADAPTIVE = {"Adam", "AdamW", "NAdam", "RAdam", "Adamax", "RMSprop", "Adagrad", "Adadelta", "Adafactor", "SparseAdam"}
REGRESSION = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"}  # the functional losses that fit values
NORMS = {"LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "RMSNorm", "InstanceNorm1d", "InstanceNorm2d"}

PER_MODULE = ("grad_norm", "grad_max", "grad_mean", "grad_zero_frac", "weight_norm", "update_ratio", "update_l1", "grad_weight_cos",
              "act_min", "act_max", "act_mean", "act_std", "act_zero_frac", "act_nan", "dead_frac", "sat_frac", "in_dead_frac", "nan_count",
              "training", "attn_entropy", "attn_maxprob")


@dataclass
class RunData:
    path: str
    run: dict[str, Any]
    modules: list[ModuleInfo]
    params: list[dict[str, Any]]
    steps: dict[str, np.ndarray]
    metrics: dict[str, tuple[np.ndarray, np.ndarray]]  # kind -> (steps, matrix steps x modules)
    events: list[Event]
    input_stats: tuple[np.ndarray, np.ndarray]  # (steps, rows of min, max, mean, std, non-finite)
    index: dict[str, int] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)  # what measured steps' functions were given
    model_steps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # the steps of each further model
    phase: dict[str, Any] | None = None  # the training phase diagnosed, when the run trained models one after another

    @property
    def optimizers(self) -> list[dict[str, Any]]:
        """Each optimizer's type and parameter groups' hyperparameters, as recorded (the primary first)."""
        value = self.run.get("optimizers")
        return [o for o in value if isinstance(o, dict)] if isinstance(value, list) else []

    def observed(self, kind: str) -> list[Observation]:
        return [o for o in self.observations if o.kind == kind]

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.modules]

    @property
    def n_steps(self) -> int:
        return len(self.steps["step"])

    def metric(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        return self.metrics.get(kind, (np.zeros(0, dtype=np.int64), np.zeros((0, len(self.modules)), dtype=np.float32)))

    def series(self, kind: str, module: str) -> tuple[np.ndarray, np.ndarray]:
        steps, mat = self.metric(kind)
        i = self.index[module]
        return steps, mat[:, i].astype(np.float64) if mat.size else np.zeros(0)

    @property
    def optimizer_type(self) -> str:
        """The class name of the (first) optimizer: SGD, AdamW, ..."""
        opts = self.optimizers
        return str((opts[0] if opts else {}).get("type") or self.run.get("optimizer") or "")

    def own_layers(self) -> list[int]:
        """Leaf modules with parameters of their own: the layers."""
        parents = {m.parent for m in self.modules if m.parent is not None}
        return [m.id for m in self.modules if m.own_params > 0 and m.name not in parents]

    def feeds_a_norm(self) -> set[str]:
        """The layers whose output the next module run (in forward order) takes into a normalisation: the scale of
        their output, and of their weights, is the norm's to remove."""
        rank = self.forward_rank()
        parents = {m.parent for m in self.modules if m.parent is not None}
        ran = sorted((m for m in self.modules if m.forward_order is not None and m.name not in parents), key=lambda m: rank[m.id])
        return {a.name for a, b in zip(ran, ran[1:]) if a.own_params > 0 and a.type not in NORMS and b.type in NORMS}

    def forward_rank(self) -> dict[int, int]:
        order = [(m.forward_order if m.forward_order is not None else 10**6 + m.id, m.id) for m in self.modules]
        return {mid: r for r, (_, mid) in enumerate(sorted(order))}


def load(path: str) -> RunData:
    """Read a store; raises StoreError with a clear message for files that are not (usable) stores,
    and :class:`~gradsight.store.DamagedStore` naming what is wrong for a store that cannot be read."""
    try:
        return _load(path)
    except StoreError:
        raise
    except (sqlite3.Error, ValueError, TypeError, KeyError, IndexError, OverflowError, json.JSONDecodeError) as exc:
        raise DamagedStore(f"{path}: a damaged gradsight run store ({exc})") from None


def _load(path: str) -> RunData:
    with RunStore(path) as store:
        run = store.run()
        modules = store.modules()
        steps = store.steps()
        steps.setdefault("loss_finite", np.where(np.isfinite(steps["loss"]), 1.0, np.nan))
        never = any(e.name == NEVER_STEPPED for e in store.events())  # no step is what there is to diagnose
        if not len(steps["step"]) and not never:
            status = run.get("status")
            why = "it is still being written and has no step yet" if status == "running" else "it recorded no training step"
            raise StoreError(f"{path}: nothing to diagnose: {why}")
        width = len(modules)
        if [m.id for m in modules] != list(range(width)):
            raise ValueError("the modules table's ids are not 0..n-1")
        kinds = set(store.metric_kinds())
        metrics = {kind: store.metric(kind, width=width) for kind in PER_MODULE if kind in kinds}
        params = store.params()
        if "param_weight_norm" in kinds:  # (per parameter: its columns are the params table's ids)
            metrics["param_weight_norm"] = store.metric("param_weight_norm", width=len(params))
        inp_steps, inp = store.metric("input_stats", width=5)
        data = RunData(str(path), run, modules, params, steps, metrics, store.events(), (inp_steps, inp),
                       observations=store.observations(), model_steps=store.model_steps())
    data.index = {m.name: m.id for m in modules}
    return _last_phase(data)


def _last_phase(data: RunData) -> RunData:
    """A script that trains one model and then another (a teacher, then its student; pre-training, then a new
    head's model) holds phases one after another in one store. The diagnosis is of the last phase: the earlier
    one's steps are another model's, and its learning rate and loss beside the later one's read as a jump and a
    spike. A phase starts where a model's first step is and no other model steps beside it (a GAN's two networks
    step together: one phase)."""
    parts = [m for m in data.run.get("models") or [] if isinstance(m, dict) and isinstance(m.get("first_step"), int)]
    if len(parts) < 2:
        return data
    start = max(int(m["first_step"]) for m in parts)
    beside = any(len(v.get("step", ())) and float(np.nanmax(v["step"])) >= start for v in data.model_steps.values())
    keep = data.steps["step"] >= start
    if start <= 0 or beside or not keep.any() or keep.all():
        return data
    data.steps = {k: v[keep] for k, v in data.steps.items()}
    data.metrics = {k: (st[st >= start], mat[st >= start]) for k, (st, mat) in data.metrics.items()}
    inp_steps, inp = data.input_stats
    data.input_stats = (inp_steps[inp_steps >= start], inp[inp_steps >= start])
    data.events = [e for e in data.events if e.step is None or e.step >= start]
    data.observations = [o for o in data.observations if o.step >= start]
    names = [str(m.get("name") or "") for m in parts if int(m["first_step"]) == start]
    data.phase = {"models": names, "from_step": start, "phases": len({int(m["first_step"]) for m in parts})}
    return data
