"""Time of `diagnose` on a large synthetic store (no torch needed).

    python benchmarks/diagnosis_speed.py [--steps 2000] [--modules 200] [--every 50]

Writes a store the way the runtime does (per-step gradient norms of every module,
activation statistics every --every steps, a loss spike near the end), then
times loading + analysis + the JSON diagnosis, best of 3. Goal: under 2 s at
2,000 steps x 200 modules.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pyserver"))

from gradsight.analysis.diagnose import diagnose  # noqa: E402
from gradsight.store import StoreWriter  # noqa: E402
from gradsight.store.rows import StepRow  # noqa: E402


def synth_store(path: Path, steps: int, modules: int, every: int) -> None:
    rng = np.random.default_rng(0)
    w = StoreWriter(path, {"script": "synthetic.py", "status": "finished", "optimizer": "AdamW", "model": "Synthetic"})
    blocks = max(1, (modules - 2) // 3)
    names = [""]
    for b in range(blocks):
        names += [f"blocks.{b}", f"blocks.{b}.fc", f"blocks.{b}.act"]
    names = names[: modules - 1] + ["head"]
    for i, name in enumerate(names):
        parent = name.rpartition(".")[0] if name else None
        typ = "Linear" if name.endswith(("fc", "head")) else "ReLU" if name.endswith("act") else "Block" if name else "Model"
        own = 4160 if typ == "Linear" else 0
        w.execute("INSERT INTO modules (id, name, type, type_module, parent, n_params, own_params, forward_order, file, line, owner, attr)"
                  " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", (i, name, typ, "synthetic", parent, own, own, i, None, None, None, None))
    for j, name in enumerate(n for n in names if n.endswith(("fc", "head"))):
        w.execute("INSERT INTO params VALUES (?,?,?,?,?,?,?,?)", (j, f"{name}.weight", names.index(name), "[64, 64]", 4096, 1, 1, 1))
    base = rng.uniform(0.1, 1.0, len(names))
    spike = int(steps * 0.9)
    for s in range(steps):
        g = base * rng.lognormal(0, 0.1, len(names)) * (50 if s == spike else 1)
        loss = 2.0 * np.exp(-s / steps) + (10 if s == spike else 0)
        w.put_step(StepRow(step=s, time=float(s), duration=None, loss=loss, lr=1e-3, grad_norm=float(np.linalg.norm(g)), grad_max=float(g.max()),
                           sampled=s % every == 0, n_backward=1, grads_zeroed=1, capture=False, loss_finite=1))
        w.put_metric(s, "grad_norm", g)
        w.put_metric(s, "grad_max", g / 10)
        if s % every == 0:
            for kind in ("act_min", "act_max", "act_mean", "act_std", "grad_mean", "grad_zero_frac", "weight_norm", "update_ratio", "dead_frac"):
                w.put_metric(s, kind, rng.uniform(0.01, 1.0, len(names)) * (1e-3 if kind == "update_ratio" else 1))
    w.put_event(spike, "trigger", "loss_spike", message="synthetic spike")
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--modules", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.db"
        t0 = time.perf_counter()
        synth_store(path, args.steps, args.modules, args.every)
        print(f"store: {args.steps} steps x {args.modules} modules, {path.stat().st_size / 2**20:.1f} MiB, written in {time.perf_counter() - t0:.1f} s")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            d = diagnose(path).as_json()
            times.append(time.perf_counter() - t0)
        rc = d["root_cause"]
        print(f"diagnose: best {min(times):.3f} s, median {sorted(times)[1]:.3f} s "
              f"(root cause {rc['module'] + '/' + rc['kind'] if rc else None}, {len(d['layers'])} layers)")


if __name__ == "__main__":
    main()
