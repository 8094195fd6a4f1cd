"""First-class callbacks for the training frameworks that own the loop (imported lazily: each module imports
its framework). ``gradsight trace`` needs neither; they serve runs started some other way (``accelerate
launch``, a notebook, a job scheduler), and join a traced run when there is one."""

from __future__ import annotations

from typing import Any

from torch import nn


def inner_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside a framework's wrapper (accelerate's AcceleratedOptimizer, Lightning's
    LightningOptimizer): its step is the one PyTorch's optimizer hooks see."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def owner_module(root: nn.Module, optimizer: Any) -> nn.Module:
    """The smallest submodule of ``root`` holding every parameter ``optimizer`` steps (a LightningModule's
    ``self.net``, or a GAN's generator), else ``root``: the model named as ``gradsight trace`` would name it."""
    wanted = {id(p) for g in getattr(optimizer, "param_groups", []) for p in g["params"]}
    if not wanted:
        return root
    best, size = root, sum(1 for _ in root.parameters())
    for _, mod in root.named_modules():
        ids = {id(p) for p in mod.parameters()}
        if wanted <= ids and len(ids) <= size:  # (pre-order: an equal, deeper one wins)
            best, size = mod, len(ids)
    return best
