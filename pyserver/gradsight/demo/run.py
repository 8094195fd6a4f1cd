"""``gradsight demo``: train the built-in transformer under gradsight and report what broke."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

from ..analysis.data import RunData, load
from ..analysis.diagnose import analyse_run, build
from ..fixes import attach
from ..runtime.session import Session
from ..store import OutputError, check_replaceable, prepare_output
from ..thresholds import Thresholds
from ..viz import pictures
from ..viz.report import html_report, pdf_report
from . import model as demo_model


def run_demo(out: Path) -> int:
    try:
        if out.exists() and not out.is_dir():
            raise OutputError(f"{out}: is a file; --out must be a folder")
        out.mkdir(parents=True, exist_ok=True)
        for name in ("report.html", "report.pdf", "heatmap.png"):  # written again only when gradsight wrote them
            check_replaceable(out / name)
        store = Path(prepare_output(out / "snapshot.db", overwrite=True))
    except (OutputError, OSError) as exc:
        print(f"gradsight demo: {exc}", file=sys.stderr)
        return 2
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
        session = Session(store, model=model, optimizer=optimizer, script="gradsight demo", argv=["gradsight", "demo"], overwrite=True)
        return optimizer

    demo_model.make_optimizer = instrumented
    try:
        losses = demo_model.train()
    finally:
        demo_model.make_optimizer = original
        if session is not None:
            session.close()
    assert session is not None
    trained = time.perf_counter() - started
    print(f"gradsight demo: {len(losses)} steps in {trained:.1f} s; diagnosing", file=sys.stderr)
    data = load(str(store))
    findings, cause = analyse_run(data, Thresholds())
    diagnosis = attach(build(data, findings, cause), data, findings, cause, script=demo_model.__file__)
    anomaly = diagnosis["anomaly"]
    (out / "heatmap.png").write_bytes(pictures.heatmap(data, anomaly_step=anomaly["step"] if anomaly else None,
                                                       capture=_capture(data, anomaly)))
    (out / "report.html").write_text(html_report(data, diagnosis), encoding="utf-8")
    pdf_report(data, diagnosis, str(out / "report.pdf"))
    if anomaly:
        print(f"anomaly: step {anomaly['step']} ({anomaly['trigger']})")
    else:
        print("anomaly: none caught")
    rc = diagnosis["root_cause"]
    if rc:
        print(f"root cause: {rc['module']} - {rc['kind']} (confidence {rc['confidence']:.2f})")
        print(f"  evidence: {diagnosis['evidence']}")
        print("  path: " + " -> ".join(rc["path"]))
    if diagnosis["fixes"]:
        fix = diagnosis["fixes"][0]
        print(f"first fix: {fix['title']}")
        print("\n".join("    " + ln for ln in fix["snippet"].splitlines()))
    print(f"written: {out / 'report.html'}, {out / 'report.pdf'}, {out / 'heatmap.png'}, {store}")
    print(f"gradsight demo: done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _capture(data: RunData, anomaly: dict[str, Any] | None) -> tuple[int, int] | None:
    if not anomaly:
        return None
    ends = [e.data.get("capture_until") for e in data.events if e.kind == "trigger" and e.step == anomaly["step"]]
    return (int(anomaly["step"]), int(ends[0])) if ends and ends[0] is not None else None
