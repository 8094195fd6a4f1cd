"""The zoo as data: the split, the mutants of each half, where things are. Shared by manifest.py and run.py."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import operators as ops

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository root (benchmarks/faultzoo/ -> .)
MANIFEST = HERE / "manifest.json"
SPLIT = HERE / "split.toml"


def load_split() -> dict[str, dict[str, list[str]]]:
    with open(SPLIT, "rb") as f:
        return tomllib.load(f)


def half_of(base: str, split: dict | None = None) -> str:
    split = split or load_split()
    for half, spec in split.items():
        if base in spec["bases"]:
            return half
    raise KeyError(f"base {base} is in no half of split.toml")


def check_split(split: dict) -> None:
    names = set(ops.base_names())
    fams = {op.family for op in ops.OPERATORS}
    seen_b, seen_f = [], []
    for spec in split.values():
        seen_b += spec["bases"]
        seen_f += spec["families"]
    if sorted(seen_b) != sorted(names):
        raise SystemExit(f"split.toml bases {sorted(seen_b)} != bases/ {sorted(names)}")
    if sorted(seen_f) != sorted(fams):
        raise SystemExit(f"split.toml families {sorted(seen_f)} != operator families {sorted(fams)}")


def generate_all() -> list[tuple[str, ops.Mutant]]:
    """(half, mutant) for every base and every in-half mutant."""
    split = load_split()
    check_split(split)
    out = []
    for half, spec in split.items():
        fams = set(spec["families"])
        for m in ops.generate(spec["bases"], pairs=lambda b, op, fams=fams: op.family in fams):
            out.append((half, m))
    return out


def digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def load_manifest() -> dict:
    return json.loads(MANIFEST.read_text())
