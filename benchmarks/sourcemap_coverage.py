"""Source-map coverage: of the modules a script creates in user files, the share mapped to their creating line.

    python benchmarks/sourcemap_coverage.py [SCRIPT ...] [--json] [--no-notes]

Each script (default: tests/scripts, tests/scripts/styles, tests/scenarios and the fault zoo's
bases in benchmarks/faultzoo/bases when they exist) runs under ``gradsight trace`` in a
subprocess with a profiler that notes, independently of gradsight, the frame that calls each
module's class (the first ``__init__`` entered for a new module object: its caller). A module
whose caller is in a user file is *user-created*; its truth is that caller's file and line.
Then, for every module of the store:

- ``stored``: the store's file/line equal the truth (what ``diagnose`` and the panel use);
- ``editor``: the language server's source map (``server.sourcemap.resolve``) finds the same line
  in the file's text (what decorations, hovers and diagnostics use);
- ``in torch``: modules mapped into torch's own files (should be none).

``--no-notes`` switches the creation notes off, as for a model handed to ``gradsight.watch()``
after it was built: then classes and the caller's code (``ast``) are all the map has.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ARGS = {"faults.py": ["--fault", "grad_explode", "--steps", "40"], "bert_train.py": ["4"]}


def default_scripts() -> list[Path]:
    found = sorted((ROOT / "tests" / "scripts").glob("*.py")) + sorted((ROOT / "tests" / "scripts" / "styles").glob("*.py"))
    found += sorted(p for p in (ROOT / "tests" / "scenarios").glob("*.py") if not p.name.startswith("_"))
    for zoo in (ROOT / "benchmarks" / "faultzoo" / "bases", Path("/work/main/benchmarks/faultzoo/bases")):
        if zoo.is_dir():
            found += sorted(p for p in zoo.glob("*.py") if not p.name.startswith("_"))
            break
    return found


# -- inside the subprocess: run one script with the truth profiler ---------------------------------------

def run_one(script: str, store: str, truth_out: str, no_notes: bool, args: list[str]) -> int:
    import torch
    from torch import nn

    from gradsight.runtime import creation, trace
    from gradsight.runtime.session import Settings

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    seen: set[int] = set()
    keep: list[Any] = []  # the modules themselves, so that ids stay unique
    truth: dict[int, tuple[str, int, str]] = {}

    def profiler(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name != "__init__" or not frame.f_code.co_argcount:
            return
        obj = frame.f_locals.get(frame.f_code.co_varnames[0])
        if not isinstance(obj, nn.Module) or id(obj) in seen:
            return
        seen.add(id(obj))
        keep.append(obj)
        caller = frame.f_back
        if caller is not None:
            truth[id(obj)] = (caller.f_code.co_filename, caller.f_lineno, creation.file_kind(caller.f_code.co_filename))

    if no_notes:
        creation.install = lambda: None  # type: ignore[assignment]
    sys.setprofile(profiler)
    try:
        status = trace.run(script, args, module=False, store=store, settings=Settings(), quiet=True)
    finally:
        sys.setprofile(None)
    names: dict[int, str] = {}
    from gradsight.store import RunStore

    with RunStore(store) as st:
        model_type = st.run().get("model")
    # the watched root: the module whose type the store names and that holds the most modules
    roots = [m for m in keep if type(m).__name__ == model_type]
    root = max(roots, key=lambda m: sum(1 for _ in m.modules()), default=None)
    if root is not None:
        names = {id(m): n for n, m in root.named_modules()}
    out = {names[k]: {"file": f, "line": ln, "kind": kind} for k, (f, ln, kind) in truth.items() if k in names}
    Path(truth_out).write_text(json.dumps({"status": status, "truth": out, "torch_dir": torch_dir}))
    return 0


# -- in the parent: compare -------------------------------------------------------------------------------

def measure(script: Path, no_notes: bool) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "pyserver"))
    from gradsight.server.sourcemap import resolve
    from gradsight.store import RunStore

    with tempfile.TemporaryDirectory() as tmp:
        store, truth_file = os.path.join(tmp, "run.db"), os.path.join(tmp, "truth.json")
        cmd = [sys.executable, __file__, "--one", str(script), "--store", store, "--truth", truth_file]
        if no_notes:
            cmd.append("--no-notes")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
        proc = subprocess.run([*cmd, "--", *ARGS.get(script.name, [])], cwd=script.parent, env=env, capture_output=True, text=True,
                              timeout=900)
        if proc.returncode != 0 or not os.path.exists(truth_file):
            return {"script": str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else str(script), "error": proc.stderr[-800:]}
        got = json.loads(Path(truth_file).read_text())
        with RunStore(store) as st:
            modules = st.modules()
    truth = got["truth"]
    files = {m.file for m in modules if m.file}
    texts = {f: Path(f).read_text() for f in files if os.path.exists(f)}
    editor: dict[str, int] = {}
    for f, text in texts.items():
        for loc in resolve(modules, f, text) or []:
            editor[loc.module] = loc.line
    user = [m for m in modules if truth.get(m.name, {}).get("kind") == "user"]
    right = [m for m in user if m.file and os.path.realpath(m.file) == os.path.realpath(truth[m.name]["file"]) and m.line == truth[m.name]["line"]]
    edit_right = [m for m in right if editor.get(m.name) == m.line]
    in_torch = [m for m in modules if m.file and os.path.abspath(m.file).startswith(got["torch_dir"])]
    return {
        "script": str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else str(script),
        "modules": len(modules), "user_created": len(user), "stored_right": len(right), "editor_right": len(edit_right),
        "in_torch": len(in_torch),
        "wrong": [{"module": m.name, "stored": f"{os.path.basename(m.file or '-')}:{m.line}",
                   "truth": f"{os.path.basename(truth[m.name]['file'])}:{truth[m.name]['line']}",
                   "editor": editor.get(m.name)} for m in user if m not in edit_right][:8],
        "torch_files": sorted({f"{m.name} -> {os.path.basename(m.file or '')}:{m.line}" for m in in_torch})[:5],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scripts", nargs="*", type=Path)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-notes", action="store_true", help="without creation notes (a model handed to watch() after it was built)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--truth", help=argparse.SUPPRESS)
    ns, rest = ap.parse_known_args()
    if ns.one:
        return run_one(ns.one, ns.store, ns.truth, ns.no_notes, [a for a in rest if a != "--"])
    scripts = [p.resolve() for p in ns.scripts] or default_scripts()
    rows = [measure(s, ns.no_notes) for s in scripts]
    ok = [r for r in rows if "error" not in r]
    total = {k: sum(r[k] for r in ok) for k in ("modules", "user_created", "stored_right", "editor_right", "in_torch")}
    if ns.json:
        print(json.dumps({"scripts": rows, "total": total}, indent=1))
        return 0
    print(f"{'script':44} {'modules':>7} {'user':>5} {'stored':>7} {'editor':>7} {'torch':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['script']:44} ERROR {r['error'].strip().splitlines()[-1] if r['error'].strip() else ''}")
            continue
        print(f"{r['script']:44} {r['modules']:7} {r['user_created']:5} {r['stored_right']:7} {r['editor_right']:7} {r['in_torch']:6}")
        for w in r["wrong"]:
            print(f"    not right: {w['module']!r}: stored {w['stored']}, truth {w['truth']}, editor line {w['editor']}")
        for t in r["torch_files"]:
            print(f"    in torch: {t}")
    u = total["user_created"] or 1
    print(f"\n{len(ok)} scripts ({len(rows) - len(ok)} failed), {total['modules']} modules, {total['user_created']} created in user files: "
          f"{total['stored_right'] / u:.1%} stored at their creating line, {total['editor_right'] / u:.1%} re-found there by the editor; "
          f"{total['in_torch']} mapped into torch's files" + (" (creation notes off: the watch() path)" if ns.no_notes else ""))
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
