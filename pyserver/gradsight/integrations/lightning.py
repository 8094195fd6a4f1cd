"""``GradsightCallback`` for PyTorch Lightning's ``Trainer`` (automatic and manual optimization).

    from gradsight.integrations.lightning import GradsightCallback
    trainer = lightning.Trainer(max_epochs=3, callbacks=[GradsightCallback("run.db")])

Watches, from ``on_fit_start`` to ``on_fit_end``, the part of the LightningModule that each optimizer steps
(``self.net``, or a GAN's generator and discriminator as two models); every keyword of
:func:`gradsight.watch` is accepted. Lightning's automatic optimization steps with a closure: the step is
read when the closure returns (loss and gradients of that step, before the update).
"""

from __future__ import annotations

import os
from typing import Any

import lightning

from . import inner_optimizer, owner_module


class GradsightCallback(lightning.Callback):
    def __init__(self, store: str | os.PathLike[str] = "run.db", **watch_options: Any) -> None:
        self.store = store
        self.options = watch_options
        self.handle: Any = None

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        import gradsight

        if self.handle is not None:
            return
        from ..runtime.session import NAME_HINTS

        optimizers = [inner_optimizer(o) for o in (trainer.optimizers or [])]
        paths = {id(m): name for name, m in pl_module.named_modules() if name}
        for opt in optimizers:  # (a GAN's models are named by their attributes, netG and netD, as trace names them)
            owner = owner_module(pl_module, opt)
            if id(owner) in paths:
                NAME_HINTS[owner] = paths[id(owner)]
        if not optimizers:
            self.handle = gradsight.watch(pl_module, store=self.store, **self.options)
            return
        self.handle = gradsight.watch(owner_module(pl_module, optimizers[0]), optimizers[0], store=self.store, **self.options)
        for opt in optimizers[1:]:  # joins the session: each further optimizer's part of the module is its own model
            gradsight.watch(owner_module(pl_module, opt), opt)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
