"""Diagnosis accuracy on the scenario suite, through the command line.

    python benchmarks/diagnosis_accuracy.py [--scenarios tests/scenarios] [-k NAME]

Each scenario declares EXPECTED = {"module": ..., "kind": ...} (or None for a
healthy run). Each is traced with `gradsight trace` and diagnosed with
`gradsight diagnose --json`; a fault is right when the root cause's module and
kind match, a healthy run when there is no root cause and no error finding.
Prints one line per scenario and the fraction right.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def expected_of(script: Path) -> dict[str, Any] | None:
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EXPECTED" for t in node.targets):
            return ast.literal_eval(node.value)  # type: ignore[no-any-return]
    raise ValueError(f"{script}: no EXPECTED = ... declaration")


def run(script: Path, workdir: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
    store = workdir / (script.stem + ".db")
    cmd = [sys.executable, "-m", "gradsight"]
    trace = subprocess.run([*cmd, "trace", str(script), "--output", str(store), "--quiet"], env=env, capture_output=True, text=True, timeout=600)
    if not store.exists():
        raise RuntimeError(f"{script.name}: trace wrote no store (exit {trace.returncode}):\n{trace.stderr[-2000:]}")
    diag = subprocess.run([*cmd, "diagnose", str(store), "--json"], env=env, capture_output=True, text=True, timeout=600)
    if diag.returncode != 0:
        raise RuntimeError(f"{script.name}: diagnose failed:\n{diag.stderr[-2000:]}")
    return json.loads(diag.stdout)  # type: ignore[no-any-return]


def verdict(expected: dict[str, Any] | None, d: dict[str, Any]) -> tuple[bool, str]:
    rc = d["root_cause"]
    errors = [(layer["module"], i["kind"]) for layer in d["layers"] for i in layer["issues"] if i["severity"] == "error"]
    errors += [(f["module"], f["kind"]) for f in d.get("findings", []) if f["severity"] == "error"]
    if expected is None:
        ok = rc is None and not errors
        got = "healthy" if ok else f"root cause {rc}, errors {errors[:3]}"
        return ok, got
    if rc is None:
        return False, "no root cause"
    modules = expected["module"] if isinstance(expected["module"], list) else [expected["module"]]  # any of these is right
    ok = rc["module"] in modules and rc["kind"] == expected["kind"]
    return ok, f"{rc['module']}/{rc['kind']} ({rc['confidence']:.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=str(ROOT / "tests" / "scenarios"))
    ap.add_argument("-k", default="", help="only scenarios whose name contains this")
    args = ap.parse_args()
    scripts = sorted(p for p in Path(args.scenarios).glob("*.py") if not p.name.startswith("_") and args.k in p.stem)
    right = 0
    with tempfile.TemporaryDirectory() as tmp:
        for script in scripts:
            t0 = time.perf_counter()
            exp = expected_of(script)
            ok, got = verdict(exp, run(script, Path(tmp)))
            right += ok
            want = "healthy" if exp is None else f"{exp['module']}/{exp['kind']}"
            print(f"{'ok  ' if ok else 'MISS'} {script.stem:<24} expected {want:<40} got {got}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"{right}/{len(scripts)} right ({right / max(1, len(scripts)):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
