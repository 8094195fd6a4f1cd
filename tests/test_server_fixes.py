"""The server's fix plumbing without a run: a fix's edits as LSP ranges, the order validation gives, and
``gradsight validate`` run as a subprocess (its progress lines, its JSON, its failure, its cancellation)."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gradsight.server import edits, validation

SCRIPT = ("import torch\nmodel = make()\nopt = torch.optim.SGD(model.parameters(), lr=10.0)\n"
          "for x in data:\n    loss = model(x)\n    loss.backward()\n    opt.step()\n")


def apply(text: str, placed: edits.Placed, file: str) -> str:
    """Apply a placed fix's ranges to ``text`` the way an editor applies a WorkspaceEdit (by positions)."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    spans = []
    for c in placed.changes:
        if c.file != file:
            continue
        (sl, sc), (el, ec), new = edits.line_range(c, lines)
        spans.append((offsets[min(sl, len(lines))] + sc, len(spans), offsets[min(el, len(lines))] + ec, new))
    for start, _, end, new in sorted(spans, reverse=True):  # (insertions at one place: in their order)
        text = text[:start] + new + text[end:]
    return text


def fix(fid: str, edit_list: list[dict[str, object]] | None = None, verdict: str | None = None, **more: object) -> dict[str, object]:
    f: dict[str, object] = {"id": fid, "title": f"title of {fid}", "kind": "learning_rate_too_high", "module": "optimizer",
                            "explanation": "", "effect": "", "validation": ["re-run"], "placement": "optimizer", **more}
    if edit_list is not None:
        f["edits"] = edit_list
        first = min(edit_list, key=lambda e: int(e["start"]))  # type: ignore[call-overload]
        f["where"] = {"file": first["file"], "line": first["start"]}
    if verdict is not None:
        f["validated"] = {"verdict": verdict, "summary": f"{verdict} summary", "effect": f"{verdict} effect"}
    return f


def test_replacement_and_insertion_in_one_file():
    f = fix("lower-lr", [{"file": "/w/train.py", "start": 3, "end": 4, "text": "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"},
                         {"file": "/w/train.py", "start": 7, "end": 7, "text": "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"}])
    p = edits.place(f, lambda _f: [])
    assert p is not None and p.file == "/w/train.py" and p.line == 3 and len(p.changes) == 2
    assert ("/w/train.py", 3) in p.lines and ("/w/train.py", 7) in p.lines
    out = apply(SCRIPT, p, "/w/train.py")
    assert "lr=0.01)\nfor x" in out and "lr=10.0" not in out
    assert "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    opt.step()\n" in out
    lines = SCRIPT.splitlines(keepends=True)
    assert edits.line_range(p.changes[0], lines)[:2] == ((2, 0), (3, 0))  # 0-based: the whole of line 3
    assert edits.line_range(p.changes[1], lines)[:2] == ((6, 0), (6, 0))  # an insertion before line 7


def test_an_edit_at_the_end_of_a_file_without_a_final_line_end():
    text = "a = 1\nb = 2"
    p = edits.place(fix("tail", [{"file": "/w/t.py", "start": 3, "end": 3, "text": "c = 3\n"}]), lambda _f: [])
    assert p is not None
    assert apply(text, p, "/w/t.py") == "a = 1\nb = 2\nc = 3\n"
    replaced = edits.place(fix("last", [{"file": "/w/t.py", "start": 2, "end": 3, "text": "b = 20\n"}]), lambda _f: [])
    assert replaced is not None and apply(text, replaced, "/w/t.py") == "a = 1\nb = 20\n"
    assert edits.line_range(replaced.changes[0], text.splitlines(keepends=True))[:2] == ((1, 0), (1, 5))


def test_edits_in_two_files_and_bad_edits():
    two = edits.place(fix("both", [{"file": "/w/model.py", "start": 5, "end": 5, "text": "x\n"},
                                   {"file": "/w/train.py", "start": 2, "end": 2, "text": "y\n"}]), lambda _f: [])
    assert two is not None and {c.file for c in two.changes} == {"/w/model.py", "/w/train.py"}
    for bad in ([{"file": "/w/t.py", "start": 0, "end": 1, "text": "x\n"}],  # lines are 1-based
                [{"file": "/w/t.py", "start": 4, "end": 3, "text": "x\n"}],  # end before start
                [{"file": "/w/t.py", "start": 2, "end": 4, "text": "x\n"}, {"file": "/w/t.py", "start": 3, "end": 3, "text": "y\n"}],  # overlap
                [{"file": "", "start": 1, "end": 1, "text": "x\n"}], [{"file": "/w/t.py", "start": 1, "end": 1}]):
        assert edits.place(fix("bad", bad), lambda _f: []) is None, bad
    # insertions at one place are not an overlap: they keep their order
    same = edits.place(fix("same", [{"file": "/w/t.py", "start": 2, "end": 2, "text": "x\n"},
                                    {"file": "/w/t.py", "start": 2, "end": 2, "text": "y\n"}]), lambda _f: [])
    assert same is not None and apply("a\nb\n", same, "/w/t.py") == "a\nx\ny\nb\n"


def test_a_fix_of_the_older_shape_is_one_insertion():
    old = {"id": "zero-grad", "title": "Zero the gradients", "snippet": "optimizer.zero_grad()", "placement": "loop",
           "where": {"file": "/w/train.py", "line": 6}, "validation": ["loss\nfalls"]}
    p = edits.place(old, lambda _f: [])
    assert p is not None and p.changes == (edits.Change("/w/train.py", 6, 6, "# gradsight fix 'zero-grad': validate: loss falls\noptimizer.zero_grad()\n"),)
    layer = {**old, "placement": "layer_init", "where": {"file": "/w/m.py", "line": 3}}
    indented = edits.place(layer, lambda _f: ["class M:\n", "        self.fc = nn.Linear(2, 2)\n", "    def forward(self, x):\n"])
    assert indented is not None and indented.changes[0].text.splitlines()[1] == "        optimizer.zero_grad()"
    assert edits.place({"id": "x", "title": "t", "snippet": "s"}, lambda _f: []) is None  # no place


def test_a_fix_already_in_the_code_is_not_offered_again():
    f = fix("clip", [{"file": "/w/t.py", "start": 7, "end": 7, "text": "    # gradsight fix 'clip': clip\n    clip(model)\n"}])
    fresh = edits.place(f, lambda _f: SCRIPT.splitlines(keepends=True))
    assert fresh is not None and not fresh.applied and not fresh.hidden
    patched = apply(SCRIPT, fresh, "/w/t.py")
    again = edits.place(f, lambda _f: patched.splitlines(keepends=True))
    assert again is not None and again.applied and again.hidden
    other = edits.place(fix("other", [{"file": "/w/t.py", "start": 2, "end": 2, "text": "# gradsight fix 'other'\nx = 1\n"}]),
                        lambda _f: patched.splitlines(keepends=True))
    assert other is not None and not other.applied


def test_validated_first_harmful_hidden():
    e = [{"file": "/w/t.py", "start": 1, "end": 1, "text": "x\n"}]
    fixes = [fix("a", e), fix("b", e, "did_not_help"), fix("c", e, "validated"), fix("d", e, "worse"), fix("e", e), fix("f", e, "failed")]
    ordered = edits.with_verdicts(fixes)
    assert [f["id"] for f in ordered] == ["c", "a", "e", "b", "d", "f"]
    placed = [edits.place(f, lambda _f: []) for f in ordered]
    assert [p.label for p in placed if p] == ["title of c (validated)", "title of a", "title of e", "title of b (did not help)",
                                              "title of d (made it worse)", "title of f (the re-run failed)"]
    assert [p.fix_id for p in placed if p and p.hidden] == ["d", "f"]
    c = placed[0]
    assert c is not None and c.verdict == "validated" and c.effect == "validated effect" and c.summary == "validated summary"
    # a verdict a validation of this session returned, for a fix the store does not say anything of yet
    known = edits.with_verdicts(fixes, {"e": {"verdict": "validated", "summary": "s", "effect": "loss 1.1 vs 8.7"}})
    assert [f["id"] for f in known][:2] == ["c", "e"] and known[1]["validated"]["effect"] == "loss 1.1 vs 8.7"
    assert edits.with_verdicts(fixes, {"c": {"verdict": "worse"}})[0]["id"] == "c"  # the store's own verdict wins


def test_progress_lines():
    step = validation.parse_progress("validate: 2/3 lower-learning-rate validated: no loss spike through step 140")
    assert step == validation.Step(2, 3, "lower-learning-rate validated: no loss spike through step 140") and step.percentage == 67
    assert validation.parse_progress("validate: 0/3") == validation.Step(0, 3, "")
    unknown = validation.parse_progress("validate: 0/? re-running run.db")
    assert unknown == validation.Step(0, None, "re-running run.db") and unknown.percentage is None
    assert validation.parse_progress("validate: 1/2x") is None
    assert validation.parse_progress("gradsight: 60 steps") is None and validation.parse_progress("validate: two of three") is None
    argv = validation.command("/w/run.db", top=2)
    assert argv[1:] == ["-m", "gradsight", "validate", "/w/run.db", "--top", "2", "--json"]
    assert validation.command("/w/run.db", fix="zero-grad", steps=50)[4:] == ["/w/run.db", "--fix", "zero-grad", "--steps", "50", "--json"]
    assert validation.verdicts({"fixes": [{"id": "a", "verdict": "validated", "summary": "s", "effect": "e"}, {"id": "b"}, "x",
                                          {"fix": "c", "verdict": "worse", "summary": "worse: loss 9"}]}) == {
        "a": {"verdict": "validated", "summary": "s", "effect": "e"}, "c": {"verdict": "worse", "summary": "worse: loss 9", "effect": ""}}


def stub(tmp_path: Path, body: str) -> list[str]:
    """A stand-in process for the subprocess plumbing: ``body`` as a Python script."""
    path = tmp_path / "stub.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


async def test_run_reads_progress_and_json(tmp_path: Path):
    argv = stub(tmp_path, """
        import json, sys
        for i, f in enumerate(["a", "b"], 1):
            print(f"validate: {i}/2 {f} re-running", file=sys.stderr, flush=True)
        print("some other line", file=sys.stderr)
        print(json.dumps({"fixes": [{"fix": "a", "verdict": "validated", "summary": "gone", "effect": "loss 1 vs 9"}]}, indent=2))
    """)
    steps: list[validation.Step] = []
    result = await validation.run(argv, on_progress=steps.append)
    assert result["fixes"][0]["verdict"] == "validated" and result["fixes"][0]["id"] == "a"  # (named "fix" by the CLI)
    assert [(s.done, s.total, s.message) for s in steps] == [(1, 2, "a re-running"), (2, 2, "b re-running")]


async def test_run_fails_with_the_last_line_of_stderr(tmp_path: Path):
    argv = stub(tmp_path, """
        import sys
        print("validate: 1/1 a", file=sys.stderr)
        print("gradsight validate: run.db has no anomaly to validate a fix against", file=sys.stderr)
        print("", file=sys.stderr)
        sys.exit(2)
    """)
    with pytest.raises(validation.ValidateError, match="^gradsight validate: run.db has no anomaly to validate a fix against$"):
        await validation.run(argv)
    with pytest.raises(validation.ValidateError, match="printed no verdicts"):
        await validation.run(stub(tmp_path, "print('not json')"))


@pytest.mark.skipif(os.name != "posix", reason="process groups")
async def test_cancelling_stops_the_process_and_its_children(tmp_path: Path):
    pids = tmp_path / "pids"
    argv = stub(tmp_path, f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print("validate: 1/3 a", file=sys.stderr, flush=True)
        time.sleep(60)
    """)
    seen: list[validation.Step] = []
    task = asyncio.ensure_future(validation.run(argv, on_progress=seen.append))
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert seen, "no progress line"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for pid in map(int, pids.read_text().split()):
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            if _zombie(pid):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"process {pid} still runs")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
