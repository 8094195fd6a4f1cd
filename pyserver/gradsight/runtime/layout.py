"""The structure of a watched model: modules, parameters, and how they nest.

Module ids are positions in ``named_modules()`` of the root model; parameter
ids positions in ``named_parameters()``. ``member`` is a (modules x params)
0/1 matrix: module i contains parameter j (at any depth), so per-module values
are one matrix product over per-parameter values, never a Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

# Module types whose output units can die (exact zeros) and whose input saturates.
RELU_LIKE = (nn.ReLU, nn.ReLU6, nn.Threshold)
SATURATING = (nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardsigmoid, nn.Softsign)
# Layers whose input columns are the units of the layer before them.
WEIGHTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Bilinear)


@dataclass
class Layout:
    root: nn.Module
    names: list[str]
    modules: list[nn.Module]
    parents: list[str | None]
    param_names: list[str]
    params: list[nn.Parameter]
    param_module: np.ndarray  # owning module id of each parameter
    member: np.ndarray  # (n_modules, n_params) float64 0/1
    numel: np.ndarray  # per parameter
    module_index: dict[int, int] = field(default_factory=dict)  # id(module) -> module id
    param_index: dict[int, int] = field(default_factory=dict)  # id(param) -> param id

    def __post_init__(self) -> None:
        # derived once: the per-step path only reads these
        self.all_params = np.ones(len(self.params), dtype=bool)
        self.module_numel = self.member @ self.numel
        self.module_has_params = self.member.sum(axis=1)
        self.no_params = self.module_has_params == 0
        self.owns_params = np.zeros(len(self.modules), dtype=bool)
        self.owns_params[self.param_module] = True
        self.sparse = any(isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse for m in self.modules)
        # FSDP2 shards parameters (and their gradients) across ranks: their per-rank sums are reduced
        self.sharded = np.array([is_sharded(p) for p in self.params], dtype=bool)
        self.sharded_any = bool(self.sharded.any())

    @classmethod
    def from_model(cls, root: nn.Module) -> Layout:
        names: list[str] = []
        modules: list[nn.Module] = []
        index: dict[int, int] = {}
        for name, mod in root.named_modules():
            index[id(mod)] = len(names)
            names.append(name)
            modules.append(mod)
        parents = [None if not n else (n.rpartition(".")[0]) for n in names]
        param_names: list[str] = []
        params: list[nn.Parameter] = []
        owner: list[int] = []
        pindex: dict[int, int] = {}
        for mi, mod in enumerate(modules):
            for pname, p in mod.named_parameters(recurse=False):
                if id(p) in pindex:  # shared (tied) parameter: first owner keeps it
                    continue
                pindex[id(p)] = len(params)
                param_names.append(f"{names[mi]}.{pname}" if names[mi] else pname)
                params.append(p)
                owner.append(mi)
        by_name = {n: i for i, n in enumerate(names)}
        member = np.zeros((len(modules), len(params)), dtype=np.float64)
        for pj, mi in enumerate(owner):
            name = names[mi]
            # the owner and each of its ancestors contain the parameter
            while True:
                member[by_name[name], pj] = 1.0
                if not name:
                    break
                name = name.rpartition(".")[0]
        numel = np.array([p.numel() for p in params], dtype=np.float64)
        return cls(root, names, modules, parents, param_names, params, np.array(owner, dtype=np.int64), member, numel, index, pindex)

    @property
    def n_modules(self) -> int:
        return len(self.modules)

    def own_params(self, module_id: int) -> list[int]:
        return [int(j) for j in np.nonzero(self.param_module == module_id)[0]]

    def has_own_params(self) -> np.ndarray:
        return self.owns_params.copy()


def is_sharded(t: object) -> bool:
    """A DTensor whose placements shard it (FSDP2's parameters and gradients)."""
    placements = getattr(t, "placements", None)
    return placements is not None and any(getattr(p, "is_shard", lambda: False)() for p in placements)


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of a tensor this rank holds: a DTensor's local shard, any other tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None and hasattr(t, "placements") else t


def first_tensor(value: object) -> torch.Tensor | None:
    """The first tensor in a module's output (tensor, tuple, list, dict, ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for v in value:
            if isinstance(v, torch.Tensor):
                return v
        return None
    if isinstance(value, dict):
        for v in value.values():
            if isinstance(v, torch.Tensor):
                return v
    return None
