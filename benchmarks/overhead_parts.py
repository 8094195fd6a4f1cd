"""Where a watched framework run's extra time goes: plain blocks beside watched blocks with one part of
gradsight switched off, and what the training thread spent (CPU time in user and system mode, minor page faults).

    OMP_NUM_THREADS=1 python benchmarks/overhead_parts.py [--stack hf|lightning] [--rounds 4] [--off PART,...]

The stacks, blocks and rounds are ``overhead_frameworks.py``'s (``measure``: the same run from the same weights, the
order of the two modes swapped every other round). ``--off`` takes parts away from the watched blocks (a diagnostic only:
such a run is not a working gradsight):

- ``tags``: module outputs' graph nodes are not held (the NaN origin's walk has no marks);
- ``inputs``: the model's inputs are not kept for a capture;
- ``forward``: the global module hooks do nothing (they stay registered: PyTorch's slower call path remains);
- ``rows``: step and metric rows are not put on the store's queue (the writer thread has nothing to commit).

Counts are the training thread's own (``RUSAGE_THREAD``): the store's writer thread is not in them. Minor page
faults are pages the allocator got back from the kernel anew; between processes they vary by several hundred
a step, so compare a variant with the plain blocks of its own run.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "pyserver")]
import overhead_frameworks as frameworks  # noqa: E402
from gradsight.runtime import capture, hooks, nanorigin  # noqa: E402
from gradsight.store import writer  # noqa: E402
from gradsight.store.rows import StepRow, insert_sql  # noqa: E402

PARTS = ("tags", "inputs", "forward", "rows")


def switch_off(parts: set[str]) -> None:
    """Replace the named parts of the runtime by no-ops, for the rest of this process."""
    if "tags" in parts:
        nanorigin.Tags.hold = lambda self, fn, module_id: None  # type: ignore[method-assign]
    if "inputs" in parts:
        capture.Inputs.add = lambda self, step, args, kwargs: None  # type: ignore[method-assign]
    if "forward" in parts:
        hooks.ForwardWatch._pre = lambda self, module, args: None  # type: ignore[method-assign]
        hooks.ForwardWatch._post = lambda self, module, args, *rest: None  # type: ignore[method-assign]
    if "rows" in parts:
        original = writer.StoreWriter.execute
        per_step = ("INSERT OR REPLACE INTO metrics", insert_sql("steps", StepRow))

        def execute(self: writer.StoreWriter, sql: str, params: Any) -> None:
            if not sql.startswith(per_step):
                original(self, sql, params)

        writer.StoreWriter.execute = execute  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stack", choices=("hf", "lightning"), default="hf")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--off", default="", help=f"parts switched off in the watched blocks, of {', '.join(PARTS)}")
    args = ap.parse_args()
    off = {p for p in args.off.split(",") if p}
    unknown = off - set(PARTS)
    if unknown:
        ap.error(f"--off: unknown part(s) {', '.join(sorted(unknown))}; the parts are {', '.join(PARTS)}")
    switch_off(off)
    title, run = frameworks.hf_stack(16, 64) if args.stack == "hf" else frameworks.lightning_stack(32)
    usage: dict[int, tuple[float, float, float]] = {}  # id(block) -> (minor faults, user ms, system ms) per step

    def counted(steps: int, store: Path | None) -> frameworks.Block:
        before = resource.getrusage(resource.RUSAGE_THREAD)
        block = run(steps, store)
        after = resource.getrusage(resource.RUSAGE_THREAD)
        usage[id(block)] = ((after.ru_minflt - before.ru_minflt) / steps, (after.ru_utime - before.ru_utime) / steps * 1000,
                            (after.ru_stime - before.ru_stime) / steps * 1000)
        return block

    with tempfile.TemporaryDirectory() as tmp:
        res = frameworks.measure(counted, args.rounds, args.steps, Path(tmp), args.stack)
    watched = "watched" + "".join(f" -{p}" for p in sorted(off))
    rows = {mode: [(b.ms_per_step(), *usage[id(b)]) for b in res[key]] for mode, key in (("plain", "plain"), (watched, "gradsight"))}
    print(f"{title}; {args.rounds} rounds x {args.steps} steps per mode (medians over rounds; per step, the training thread)")
    for mode, values in rows.items():
        ms, faults, user, system = (statistics.median(v[i] for v in values) for i in range(4))
        print(f"  {mode:28s} {ms:6.2f} ms/step   user {user:6.2f} ms   system {system:5.2f} ms   minor faults {faults:6.0f}")
    ratios = sorted(w[0] / p[0] for w, p in zip(rows[watched], rows["plain"]))
    print(f"  ratio {statistics.median(ratios):.3f} (per round {', '.join(f'{r:.3f}' for r in ratios)})", flush=True)


if __name__ == "__main__":
    main()
