"""``gradsight demo``: train the built-in transformer under gradsight and report what broke."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from ..runtime.session import Session
from . import model as demo_model


def run_demo(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    store = out / "snapshot.db"
    started = time.perf_counter()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    print(f"gradsight demo: training a {demo_model.LAYERS}-block transformer ({demo_model.STEPS} steps) "
          "with a sign error in the embedding's weight decay", file=sys.stderr)
    session: Session | None = None
    original = demo_model.make_optimizer

    def instrumented(model: demo_model.TinyTransformer, lr: float = demo_model.LR,
                     weight_decay: float = demo_model.WEIGHT_DECAY) -> torch.optim.Optimizer:
        nonlocal session
        optimizer = original(model, lr, weight_decay)
        session = Session(store, model=model, optimizer=optimizer, script="gradsight demo", argv=["gradsight", "demo"])
        return optimizer

    demo_model.make_optimizer = instrumented
    try:
        losses = demo_model.train()
    finally:
        demo_model.make_optimizer = original
        if session is not None:
            session.close()
    assert session is not None
    took = time.perf_counter() - started
    print(f"gradsight demo: {len(losses)} steps in {took:.1f} s, final loss {losses[-1]:.4g}", file=sys.stderr)
    if session.anomalies:
        step, name = session.anomalies[0]
        print(f"anomaly: step {step} ({name}); all: " + ", ".join(f"{n}@{s}" for s, n in session.anomalies))
    else:
        print("anomaly: none caught")
    print(f"snapshot: {store}")
    return 0
