"""Language-server latency on a large run: start-up, hover, code action, and step-to-notification.

    python benchmarks/lsp_latency.py [--steps 2000] [--modules 200] [--hovers 300] [--live 20]

Builds a workspace with a model file whose layer lines stand for many instances
(``self.fc = nn.Linear`` in a block repeated ~66 times) and a run store of
--steps x --modules written the way the runtime writes it, starts
``python -m gradsight serve`` over stdio with pygls's own client, then measures
- start: spawn to the `initialize` answer, and to the first `gradsight/health`;
- hover p50/p99 on layer lines and a training-loop line;
- code action p50/p99 on the root cause's line;
- step to notification: a writer keeps appending steps (all modules' metrics)
  while the server follows; time from `put_step` to the `gradsight/health`
  notification that carries that step (includes the writer's 0.2 s commit interval).
Goals: hover p99 < 20 ms, step to notification < 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pyserver"))

from gradsight.store import StoreWriter  # noqa: E402
from gradsight.store.rows import ModuleRow, StepRow  # noqa: E402

MODEL = '''from torch import nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.act = nn.ReLU()


class Model(nn.Module):
    def __init__(self, n, d=64):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 1)
'''

TRAIN = '''import torch
from model import Model

model = Model(66)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(2000):
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


def build(ws: Path, steps: int, modules: int, every: int = 50) -> tuple[StoreWriter, list[str], np.ndarray]:
    (ws / "model.py").write_text(MODEL)
    (ws / "train.py").write_text(TRAIN)
    runs = ws / ".gradsight" / "runs"
    runs.mkdir(parents=True)
    lines = {ln.split("=")[0].strip(): i + 1 for i, ln in enumerate(MODEL.splitlines()) if "self." in ln and "=" in ln}
    w = StoreWriter(runs / "big.db", {"script": str(ws / "train.py"), "status": "running", "optimizer": "AdamW", "model": "Model",
                                      "cwd": str(ws)})
    blocks = max(1, (modules - 3) // 3)
    model_py, train_py = str(ws / "model.py"), str(ws / "train.py")
    # as the runtime records them under gradsight trace: each module's creating call (site) beside its class attribute
    rows: list[tuple[Any, ...]] = [(0, "", "Model", "model", None, 0, 0, 0, train_py, 4, None, None, "|Model|0", "model"),
                                   (1, "blocks", "ModuleList", "torch.nn", "", 0, 0, 1, model_py, lines["self.blocks"], "model.Model", "blocks",
                                    "Model.__init__|nn.ModuleList|0", "blocks")]
    for b in range(blocks):
        rows += [(len(rows), f"blocks.{b}", "Block", "model", "blocks", 4160, 0, len(rows), model_py, lines["self.blocks"],
                  "model.Model", "blocks", "Model.__init__|Block|0", f"blocks.{b}"),
                 (len(rows) + 1, f"blocks.{b}.fc", "Linear", "torch.nn", f"blocks.{b}", 4160, 4160, len(rows) + 1, model_py, lines["self.fc"],
                  "model.Block", "fc", "Block.__init__|nn.Linear|0", f"blocks.{b}.fc"),
                 (len(rows) + 2, f"blocks.{b}.act", "ReLU", "torch.nn", f"blocks.{b}", 0, 0, len(rows) + 2, model_py, lines["self.act"],
                  "model.Block", "act", "Block.__init__|nn.ReLU|0", f"blocks.{b}.act")]
    rows.append((len(rows), "head", "Linear", "torch.nn", "", 65, 65, len(rows), model_py, lines["self.head"], "model.Model", "head",
                 "Model.__init__|nn.Linear|0", "head"))
    for r in rows:
        w.put_module(ModuleRow(*r[:12], site=r[12], label=r[13]))
    names = [r[1] for r in rows]
    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 1.0, len(names))
    for s in range(steps):
        put(w, s, base, rng, every, spike=s == int(steps * 0.9))
    w.put_event(int(steps * 0.9), "trigger", "grad_explode", module="blocks.40.fc", message="synthetic explosion")
    w.flush()
    return w, names, base


def put(w: StoreWriter, s: int, base: np.ndarray, rng: np.random.Generator, every: int, spike: bool = False) -> None:
    g = base * rng.lognormal(0, 0.1, len(base)) * (80 if spike else 1)
    w.put_step(StepRow(step=s, time=time.time(), duration=None, loss=2.0 * np.exp(-s / 2000) + (10 if spike else 0), lr=1e-3,
                       grad_norm=float(np.linalg.norm(g)), grad_max=None, sampled=s % every == 0, n_backward=1, grads_zeroed=1,
                       capture=False, loss_finite=1))
    w.put_metric(s, "grad_norm", g)
    w.put_metric(s, "grad_max", g / 10)
    if s % every == 0:
        for kind in ("act_min", "act_max", "act_mean", "act_std", "grad_mean", "grad_zero_frac", "weight_norm", "update_ratio", "dead_frac"):
            w.put_metric(s, kind, rng.uniform(0.01, 1.0, len(base)) * (1e-3 if kind == "update_ratio" else 1))


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1000, q))


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        t0 = time.perf_counter()
        writer, names, base = build(ws, args.steps, args.modules)
        print(f"store: {args.steps} steps x {len(names)} modules, {sum(p.stat().st_size for p in (ws / '.gradsight/runs').iterdir()) / 2**20:.1f} MiB "
              f"(written in {time.perf_counter() - t0:.1f} s)")
        client = LanguageClient("bench", "1")
        health: list[tuple[float, Any]] = []
        client.feature("gradsight/health")(lambda p: health.append((time.perf_counter(), p)))
        client.feature("gradsight/anomaly")(lambda p: None)
        diagnostics: list[Any] = []
        client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda p: diagnostics.append(p))
        t_spawn = time.perf_counter()
        await client.start_io(sys.executable, "-m", "gradsight", "serve")
        caps = lsp.ClientCapabilities(text_document=lsp.TextDocumentClientCapabilities(hover=lsp.HoverClientCapabilities()))
        await client.initialize_async(lsp.InitializeParams(capabilities=caps, root_uri=ws.as_uri(),
                                                           initialization_options={"pollInterval": 0.1}))
        t_init = time.perf_counter() - t_spawn
        client.initialized(lsp.InitializedParams())
        model_uri, train_uri = (ws / "model.py").as_uri(), (ws / "train.py").as_uri()
        for uri, text in ((model_uri, MODEL), (train_uri, TRAIN)):
            client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "python", 1, text)))
        while not any(p.records for _, p in health):
            await asyncio.sleep(0.01)
        t_first = next(t for t, p in health if p.records) - t_spawn
        print(f"start: initialize answered {t_init * 1000:.0f} ms after spawn; first health records {t_first:.2f} s "
              f"(analysis of the whole store included)")

        spots = [(model_uri, i) for i, ln in enumerate(MODEL.splitlines()) if "self.fc" in ln or "self.head" in ln or "self.act" in ln]
        spots.append((train_uri, next(i for i, ln in enumerate(TRAIN.splitlines()) if "optimizer.step()" in ln)))
        hover_t: list[float] = []
        for k in range(args.hovers):
            uri, line = spots[k % len(spots)]
            h0 = time.perf_counter()
            res = await client.text_document_hover_async(lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(line, 10)))
            hover_t.append(time.perf_counter() - h0)
            assert res is not None and "gradsight" in res.contents.value
        print(f"hover ({args.hovers}, layer lines of 1-66 instances and a loop line): p50 {pct(hover_t, 50):.1f} ms, "
              f"p99 {pct(hover_t, 99):.1f} ms  (goal p99 < 20 ms)")

        fc_line = next(i for i, ln in enumerate(MODEL.splitlines()) if "self.fc" in ln)
        action_t: list[float] = []
        n_actions = 0
        for _ in range(args.hovers // 3):
            a0 = time.perf_counter()
            res_a = await client.text_document_code_action_async(lsp.CodeActionParams(
                lsp.TextDocumentIdentifier(model_uri), lsp.Range(lsp.Position(fc_line, 0), lsp.Position(fc_line, 0)), lsp.CodeActionContext([])))
            action_t.append(time.perf_counter() - a0)
            n_actions = len(res_a or [])
        print(f"code action ({len(action_t)}, {n_actions} fixes offered on the exploding layer's line): p50 {pct(action_t, 50):.1f} ms, "
              f"p99 {pct(action_t, 99):.1f} ms")

        rng = np.random.default_rng(1)
        lat: list[float] = []
        for s in range(args.steps, args.steps + args.live):
            n_before = len(health)
            w0 = time.perf_counter()
            put(writer, s, base, rng, 50)
            while not any(p.step is not None and p.step >= s for _, p in health[n_before:]):
                await asyncio.sleep(0.002)
            lat.append(next(t for t, p in health[n_before:] if p.step is not None and p.step >= s) - w0)
            await asyncio.sleep(0.3)
        print(f"step to notification ({args.live} live steps): p50 {pct(lat, 50):.0f} ms, p99 {pct(lat, 99):.0f} ms, "
              f"max {max(lat) * 1000:.0f} ms  (goal < 1000 ms; includes the writer's 200 ms commit interval)")
        print(f"summary: hover p99 {pct(hover_t, 99):.1f} ms, code action p99 {pct(action_t, 99):.1f} ms, "
              f"step->notification median {statistics.median(lat):.2f} s")
        writer.update_run(status="finished")
        writer.close()
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--modules", type=int, default=200)
    ap.add_argument("--hovers", type=int, default=300)
    ap.add_argument("--live", type=int, default=20)
    asyncio.run(bench(ap.parse_args()))


if __name__ == "__main__":
    main()
