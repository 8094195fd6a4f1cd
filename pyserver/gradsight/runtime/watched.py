"""One watched model: its structure, its recent steps, its triggers and its activation recorder.

Made once, when the model is adopted (grouping and masks are computed here, never per step), and
written to the store's ``modules`` and ``params`` tables then.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn
from torch.nn.modules.loss import _Loss

from ..conditions import Condition
from ..store import ModuleRow, ParamRow, StoreWriter
from ..thresholds import Thresholds
from . import activations as act
from . import gradstats as gs
from .layout import WEIGHTED, Layout
from .sourcemap import map_modules
from .triggers import LAYER_TRIGGERS, History, QuickCheck, Trigger, build, condition_check, condition_needs


def is_leaf(m: nn.Module) -> bool:
    return next(iter(m.children()), None) is None


class Watched:
    def __init__(self, root: nn.Module, *, thresholds: Thresholds, triggers: tuple[str, ...], conditions: tuple[Condition, ...],
                 capture_window: int, history_len: int) -> None:
        self.root = root
        layout = self.layout = Layout.from_model(root)
        self.history = History(layout.names, maxlen=history_len)
        own = layout.has_own_params()
        leaf = np.array([is_leaf(m) for m in layout.modules])
        self.weighted = np.array([isinstance(m, WEIGHTED) or (own[i] and not isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and leaf[i])
                                  for i, m in enumerate(layout.modules)])
        self.numel = layout.member @ layout.numel
        self.own = own & leaf  # a "layer": a leaf module with parameters of its own
        built = build(layout.names, thresholds, self.own, self.weighted, self.numel, capture_window)
        self.triggers: dict[str, Trigger] = {k: v for k, v in built.items() if k in triggers}
        for cond in conditions:
            self.triggers[cond.text] = Trigger(cond.text, condition_check(cond, cond.text), capture_window, condition_needs(cond))
        self.quick = QuickCheck(thresholds, np.flatnonzero(self.own), np.flatnonzero(self.weighted), self.numel)
        self.layer_triggers = [v for k, v in self.triggers.items() if k in LAYER_TRIGGERS]
        self.other_triggers = [v for v in self.triggers.values() if v not in self.layer_triggers]
        self.recorder = act.ActivationRecorder(layout)
        self.updates = gs.UpdateTracker()
        self.order_known = False
        self.rank: dict[int, int] = {}  # module id -> its place in the forward pass, once known
        self.params_state: dict[int, tuple[int, int, int]] = {}
        self.params_due = 0  # the next sampled step at which the parameters' set-up is recorded
        self.loss_modules_seen: set[str] = set()

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
            writer.put_module(ModuleRow(i, name, type(mod).__name__, type(mod).__module__, layout.parents[i], int(self.numel[i]), own_numel,
                                        self.rank.get(i) if self.order_known else None, loc.file if loc else None,
                                        loc.line if loc else None, loc.owner if loc else None, loc.attr if loc else None,
                                        # where the editor re-finds the module, and its readable name (sourcemap.py)
                                        site=loc.site if loc else None, label=loc.label if loc else None))
        for j, pname in enumerate(layout.param_names):
            p = layout.params[j]
            writer.put_param(ParamRow(j, pname, int(layout.param_module[j]), str(list(p.shape)), int(p.numel()), bool(p.requires_grad),
                                      id(p) in in_optimizer))

    def learn_order(self, writer: StoreWriter, order: list[int]) -> None:
        """The forward order, from the first measured forward pass (modules never called go last)."""
        seen = list(dict.fromkeys(order))
        rest = [i for i in range(self.layout.n_modules) if i not in set(seen)]
        full = seen + rest
        writer.set_forward_order(full)
        self.rank = {mid: k for k, mid in enumerate(full)}
        self.order_known = True

    def note_loss_modules(self, candidates: dict[int, Any]) -> None:
        self.recorder.loss_modules |= {type(m).__name__ for m in candidates.values() if isinstance(m, _Loss)}
