"""One watched model: its structure, its recent steps, its triggers and its activation recorder.

Made once, when the model is adopted (grouping and masks are computed here, never per step), and
written to the store's ``modules`` and ``params`` tables then. A run may watch several models (a
GAN's two networks, a second training phase): each is a *part* of the store, with its modules and
parameters at consecutive ids from its offsets, named ``<model>.<name>`` once there are two.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from torch import nn
from torch.nn.modules.loss import _Loss

from ..conditions import Condition
from ..store import ModuleRow, ParamRow, StoreWriter
from ..thresholds import Thresholds
from . import activations as act
from . import gradstats as gs
from .capture import Inputs
from .layout import WEIGHTED, Layout
from .sourcemap import map_modules
from .triggers import LAYER_TRIGGERS, History, QuickCheck, Trigger, build, condition_check, condition_needs
from .unregistered import Unregistered

CONFIG_ATTRS = ("p", "negative_slope", "momentum", "eps", "num_heads", "track_running_stats", "batch_first", "dropout",
                "threshold", "min_val", "max_val", "beta", "alpha")


def module_config(module: nn.Module) -> str | None:
    """The plain-number settings that decide a module's behaviour (a dropout's p, a LeakyReLU's slope), as JSON."""
    out: dict[str, Any] = {}
    for key in CONFIG_ATTRS:
        v = getattr(module, key, None)
        if isinstance(v, (bool, int, float)) and not isinstance(v, nn.Module):
            out[key] = v
    return json.dumps(out) if out else None


def is_leaf(m: nn.Module) -> bool:
    return next(iter(m.children()), None) is None


def prefixed(prefix: str, name: str) -> str:
    if not prefix:
        return name
    return f"{prefix}.{name}" if name else prefix


class Watched:
    def __init__(self, root: nn.Module, *, thresholds: Thresholds, triggers: tuple[str, ...], conditions: tuple[Condition, ...],
                 capture_window: int, history_len: int, inputs: Inputs, part: int = 0, module_offset: int = 0, param_offset: int = 0,
                 prefix: str = "") -> None:
        self.root = root
        self.part, self.module_offset, self.param_offset = part, module_offset, param_offset
        self.prefix = prefix
        layout = self.layout = Layout.from_model(root)
        self.names = [prefixed(prefix, n) for n in layout.names]  # the store's names
        self.history = History(self.names, maxlen=history_len)
        own = layout.has_own_params()
        leaf = np.array([is_leaf(m) for m in layout.modules])
        self.weighted = np.array([isinstance(m, WEIGHTED) or (own[i] and not isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and leaf[i])
                                  for i, m in enumerate(layout.modules)])
        self.numel = layout.member @ layout.numel
        self.own = own & leaf  # a "layer": a leaf module with parameters of its own
        built = build(self.names, thresholds, self.own, self.weighted, self.numel, capture_window)
        self.triggers: dict[str, Trigger] = {k: v for k, v in built.items() if k in triggers}
        for cond in conditions:
            self.triggers[cond.text] = Trigger(cond.text, condition_check(cond, cond.text), capture_window, condition_needs(cond))
        self.quick = QuickCheck(thresholds, np.flatnonzero(self.own), np.flatnonzero(self.weighted), self.numel)
        self.layer_triggers = [v for k, v in self.triggers.items() if k in LAYER_TRIGGERS]
        self.other_triggers = [v for v in self.triggers.values() if v not in self.layer_triggers]
        self.recorder = act.ActivationRecorder(layout)
        self.updates = gs.UpdateTracker()
        self.inputs = inputs
        self.order_known = False
        self.unordered = 0  # measured forwards that called none of its modules (a functional model's F.linear calls)
        self.rank: dict[int, int] = {}  # module id -> its place in the forward pass, once known
        self.params_state: dict[int, tuple[int, int, int]] = {}
        self.params_due = 0  # the next sampled step at which the parameters' set-up is recorded
        self.loss_modules_seen: set[str] = set()
        self.param_ids = {id(p) for p in layout.params}
        self.unregistered: list[Unregistered] | None = None  # plain containers holding parameters (found at the first check)
        self.unregistered_told: set[str] = set()
        self.first_step = 0  # the run's step at which it was adopted (a later training phase starts a section there)
        self.leads: bool | None = None  # another model's steps come before the clock's in each step (set at its first step)

    def owns(self, optimizer: Any) -> bool:
        """Whether the optimizer steps parameters of this model."""
        return any(id(p) in self.param_ids for g in optimizer.param_groups for p in g["params"])

    def write_structure(self, writer: StoreWriter, order: list[int] | None, in_optimizer: set[int]) -> None:
        """The modules (with their source lines) and parameters of the model, once."""
        layout = self.layout
        self.order_known = order is not None
        self.rank = {mid: k for k, mid in enumerate(order)} if order is not None else {}
        locs = map_modules(self.root)
        for i, name in enumerate(layout.names):
            mod = layout.modules[i]
            loc = locs.get(name)
            own_numel = int(sum(layout.numel[j] for j in layout.own_params(i)))
            parent = layout.parents[i]
            writer.put_module(ModuleRow(self.module_offset + i, self.names[i], type(mod).__name__, type(mod).__module__,
                                        None if parent is None else prefixed(self.prefix, parent), int(self.numel[i]), own_numel,
                                        self.module_offset + self.rank[i] if self.order_known and i in self.rank else None,
                                        loc.file if loc else None, loc.line if loc else None, loc.owner if loc else None,
                                        loc.attr if loc else None, self.prefix,
                                        # where the editor re-finds the module, and its readable name (sourcemap.py)
                                        site=loc.site if loc else None, label=loc.label if loc else None, config=module_config(mod)))
        for j, pname in enumerate(layout.param_names):
            p = layout.params[j]
            writer.put_param(ParamRow(self.param_offset + j, prefixed(self.prefix, pname), self.module_offset + int(layout.param_module[j]),
                                      str(list(p.shape)), int(p.numel()), bool(p.requires_grad), id(p) in in_optimizer))

    def learn_order(self, writer: StoreWriter, order: list[int]) -> None:
        """The forward order, from the first measured forward pass (modules never called go last)."""
        seen = list(dict.fromkeys(order))
        rest = [i for i in range(self.layout.n_modules) if i not in set(seen)]
        full = seen + rest
        for rank, mid in enumerate(full):
            writer.execute("UPDATE modules SET forward_order = ? WHERE id = ?", (self.module_offset + rank, self.module_offset + mid))
        self.rank = {mid: k for k, mid in enumerate(full)}
        self.order_known = True

    def rename(self, prefix: str, writer: StoreWriter) -> None:
        """Name this model's modules ``<prefix>.<name>`` from now on, in memory and in the rows already written."""
        old = list(self.names)
        self.prefix = prefix
        self.names[:] = [prefixed(prefix, n) for n in self.layout.names]  # (the History and triggers hold this list)
        self.history.index = {n: i for i, n in enumerate(self.names)}
        writer.rename_modules(dict(zip(old, self.names)), {prefixed("", p): prefixed(prefix, p) for p in self.layout.param_names})
        writer.execute("UPDATE modules SET model = ? WHERE id >= ? AND id < ?", (prefix, self.module_offset, self.module_offset + len(old)))

    def note_loss_modules(self, candidates: dict[int, Any]) -> None:
        self.recorder.loss_modules |= {type(m).__name__ for m in candidates.values() if isinstance(m, _Loss)}

    def describe(self) -> dict[str, Any]:
        """The model's entry in the run's ``models`` list."""
        return {"name": self.prefix, "part": self.part, "type": type(self.root).__name__, "module_offset": self.module_offset,
                "modules": self.layout.n_modules, "param_offset": self.param_offset, "params": len(self.layout.params),
                "first_step": self.first_step}
