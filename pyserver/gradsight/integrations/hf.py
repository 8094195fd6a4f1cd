"""``GradsightCallback`` for Hugging Face ``transformers.Trainer``.

    from gradsight.integrations.hf import GradsightCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[GradsightCallback("run.db")])

Watches the model and its optimizer from ``on_train_begin`` to ``on_train_end``; every keyword of
:func:`gradsight.watch` is accepted. A step is one optimizer step (``state.global_step``), however many
micro-batches ``gradient_accumulation_steps`` takes; gradients are read before ``max_grad_norm`` clips them.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from . import inner_optimizer


class GradsightCallback(TrainerCallback):
    def __init__(self, store: str | os.PathLike[str] = "run.db", **watch_options: Any) -> None:
        self.store = store
        self.options = watch_options
        self.handle: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kwargs: Any) -> None:
        import gradsight

        if model is None or self.handle is not None:
            return
        self.handle = gradsight.watch(model, inner_optimizer(optimizer) if optimizer is not None else None, store=self.store,
                                      **self.options)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None
