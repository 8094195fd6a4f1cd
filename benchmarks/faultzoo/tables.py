"""The README's tables, made from manifest.json, operators.py and split.toml (no runs).

    python benchmarks/faultzoo/tables.py        # rewrite the tables in README.md
    python benchmarks/faultzoo/tables.py --print
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import operators as ops  # noqa: E402
import zoo  # noqa: E402

README = HERE / "README.md"
BEGIN, END = "<!-- tables: begin (python benchmarks/faultzoo/tables.py) -->", "<!-- tables: end -->"


def _section(doc: str, label: str) -> str:
    m = re.search(rf"{label}:\s*(.*?)(?:\n\s*\n|\n[A-Z][a-z]+:|$)", doc, re.S)
    return " ".join(m.group(1).split()) if m else ""


def _short(text: str, n: int = 110) -> str:
    return text if len(text) <= n else text[: n - 3].rsplit(" ", 1)[0] + "..."


def tables() -> str:
    man = zoo.load_manifest()
    entries = man["mutants"]
    out = []
    # bases
    out.append("### Bases\n")
    out.append("| base | half | family | style | steps | s (plain) | loss start -> end |")
    out.append("|---|---|---|---|---:|---:|---|")
    for half in ("dev", "heldout"):
        for name in man["split"][half]["bases"]:
            b = man["bases"][name]
            doc = ops.load_base(name).docstring
            out.append(f"| `{name}` | {half} | {_short(_section(doc, 'Family'))} | {_short(_section(doc, 'Style'))} | "
                       f"{b['steps']} | {b['seconds']:.1f} | {b['start']:.3g} -> {b['end']:.3g} |")
    out.append("\n`s (plain)`: the training itself, in a process that had imported torch already (the manifest's "
               "forked runs); a fresh `python base.py` adds about 5 s of imports (torch, and torch._dynamo on the first "
               "optimizer), about 4 s more for the two Hugging Face bases (transformers).\n")
    # operators
    kept = Counter(e["operator"] for e in entries if e["operator"] and e["kept"])
    made = Counter(e["operator"] for e in entries if e["operator"])
    half_of_family = {f: h for h in ("dev", "heldout") for f in man["split"][h]["families"]}
    out.append("### Operators\n")
    out.append("| operator | family (half) | Why | expected answers | what it mutates | taxonomy | kept / made |")
    out.append("|---|---|---:|---|---|---|---:|")
    for op in sorted(ops.OPERATORS, key=lambda o: (half_of_family[o.family], o.family, o.why, o.name)):
        out.append(f"| `{op.name}` | {op.family} ({half_of_family[op.family]}) | {op.why} | {op.expects} | {op.summary} | "
                   f"{op.taxonomy} | {kept[op.name]} / {made[op.name]} |")
    # split
    out.append("\n### The split\n")
    out.append("| half | bases | families | operators | faulty kept (dropped) | healthy kept (dropped) | kept by Why class 0/1/2/3/4/5/6 |")
    out.append("|---|---:|---:|---:|---|---|---|")
    for half in ("dev", "heldout", "all"):
        c = man["counts"][half]
        fams = len(man["split"][half]["families"]) if half != "all" else sum(len(man["split"][h]["families"]) for h in ("dev", "heldout"))
        why = "/".join(str(c["kept_by_why"].get(str(w), 0)) for w in range(7))
        out.append(f"| {half} | {c['bases']} | {fams} | {c['operators']} | {c['faulty_kept']} ({c['faulty_dropped']}) | "
                   f"{c['healthy_kept']} ({c['healthy_dropped']}) | {why} |")
    # reasons
    out.append("\n### Kept and dropped, by reason\n")
    def reason(e):
        r = e["reason"]
        if e["operator"] is None:
            return "base (healthy)"
        if r.startswith("crash"):
            return "dropped: crash"
        if "DROPPED" in r:
            return "dropped: construction check"
        if e["healthy"]:
            return "kept: bait trains" if e["kept"] else ("dropped: bait trains worse" if "worse" in r else "dropped: bait " + r.split(":")[0])
        if not e["kept"]:
            return "dropped: does not manifest"
        if "non-finite" in r:
            return "kept: non-finite loss"
        if "negative" in r:
            return "kept: negative loss"
        if "x the base" in r:
            return "kept: >= 2x the base's final loss"
        return "kept: lost >= 25% of the base's progress"
    rc = Counter((e["half"], reason(e)) for e in entries)
    keys = sorted({k for _, k in rc})
    out.append("| reason | dev | heldout |")
    out.append("|---|---:|---:|")
    for k in keys:
        out.append(f"| {k} | {rc[('dev', k)]} | {rc[('heldout', k)]} |")
    return "\n".join(out) + "\n"


def main() -> int:
    text = tables()
    if "--print" in sys.argv:
        print(text)
        return 0
    readme = README.read_text()
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    README.write_text(readme[:start] + "\n" + text + readme[end:])
    print(f"updated {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
