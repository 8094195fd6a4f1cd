"""The fix library (data files in ``library/``) and the generator that fills a fix with the script's names.

A fix file says which kinds it answers (and optionally which module types or
outside places: input / loss / optimizer), where its code goes (``where``), a
template, an explanation and validation steps. ``suggest`` ranks the fixes for
a diagnosis: those for the root cause first, then for other errors.
"""

from __future__ import annotations

import ast
import keyword
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..analysis.data import RunData
    from ..analysis.findings import Finding
    from ..analysis.rootcause import RootCause

LIBRARY = Path(__file__).with_name("library")
PLACES = {"before_step", "before_backward", "optimizer", "after_optimizer", "after_model", "layer_init", "loss", "data", "before_loop"}
OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS", "SparseAdam", "ASGD", "Rprop", "Adafactor"}


@dataclass(frozen=True)
class Fix:
    id: str
    title: str
    kinds: tuple[str, ...]
    where: str
    priority: int
    module_types: tuple[str, ...]
    modules: tuple[str, ...]
    explanation: str
    template: str
    validation: tuple[str, ...]
    evidence: str = ""  # a regex: the fix answers only findings whose evidence matches it (a specific mechanism), and comes first

    def rank(self, evidence: str) -> int:
        return self.priority - (100 if self.evidence and re.search(self.evidence, evidence) else 0)

    def applies(self, kind: str, module: str, module_type: str | None, evidence: str = "") -> bool:
        if kind not in self.kinds:
            return False
        if self.evidence and not re.search(self.evidence, evidence):
            return False
        if self.modules and module not in self.modules:
            return False
        if self.module_types and module_type not in self.module_types:
            return False
        return True


class FixLibraryError(ValueError):
    pass


@lru_cache(maxsize=1)
def library() -> tuple[Fix, ...]:
    out = []
    for path in sorted(LIBRARY.glob("*.toml")):
        with open(path, "rb") as fh:
            d = tomllib.load(fh)
        try:
            fix = Fix(d["id"], d["title"], tuple(d["kinds"]), d["where"], int(d.get("priority", 50)), tuple(d.get("module_types", [])),
                      tuple(d.get("modules", [])), d["explanation"], d["template"], tuple(d["validation"]), d.get("evidence", ""))
        except KeyError as exc:
            raise FixLibraryError(f"{path}: missing field {exc}") from None
        if fix.where not in PLACES:
            raise FixLibraryError(f"{path}: where = {fix.where!r}; expected one of {sorted(PLACES)}")
        out.append(fix)
    return tuple(out)


# -- the script's names and places ---------------------------------------------------
@dataclass
class ScriptNames:
    model: str = "model"
    optimizer: str = "optimizer"
    loss: str = "loss"
    input: str = "x"
    target: str = "y"
    lines: dict[str, int] | None = None  # place -> line (1-based) the fix goes before


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def script_names(source: str) -> ScriptNames:
    """Find the model, optimizer, loss and batch variables and the loop's lines with ``ast``."""
    names = ScriptNames(lines={})
    lines = names.lines
    assert lines is not None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            target = _name(node.targets[0])
            fn = node.value.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if target and (fname in OPTIMIZERS or "optim" in fname.lower()):
                names.optimizer = target
                lines.setdefault("after_optimizer", (node.end_lineno or node.lineno) + 1)
                lines.setdefault("optimizer", (node.end_lineno or node.lineno) + 1)
                for arg in ast.walk(node.value):
                    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr in ("parameters", "named_parameters"):
                        owner = _name(arg.func.value)
                        if owner:
                            names.model = owner
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _name(node.targets[0]) == names.model:
            lines.setdefault("after_model", (node.end_lineno or node.lineno) + 1)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
            call = node.value.func
            owner = _name(call.value)
            if call.attr == "step" and owner == names.optimizer:
                lines.setdefault("before_step", node.lineno)
            if call.attr == "backward":
                if owner:
                    names.loss = owner.split(".")[0] if "." not in owner else owner
                lines.setdefault("before_backward", node.lineno)
        if isinstance(node, ast.Call) and _name(node.func) == names.model and node.args:
            first_arg = _name(node.args[0])
            if first_arg:
                names.input = first_arg
                lines.setdefault("data", node.lineno)
    backward = lines.get("before_backward")
    if backward is not None:  # the outermost loop around loss.backward(): the training loop
        loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and n.lineno <= backward <= (n.end_lineno or n.lineno)]
        if loops:
            lines["before_loop"] = min(n.lineno for n in loops)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _name(node.targets[0]) == names.loss:
            lines.setdefault("loss", node.lineno)
            if isinstance(node.value, ast.Call) and len(node.value.args) >= 2:
                label = _name(node.value.args[1])
                if label:
                    names.target = label
    return names


def is_identifier(name: str) -> bool:
    """A Python name that may stand in generated code as it is (not a keyword)."""
    return name.isidentifier() and not keyword.iskeyword(name) and name.isascii()


def module_ref(model: str, module: str) -> str:
    """``model.blocks[0].attn`` for the module ``blocks.0.attn``. Names come from a store, which anyone can
    write: a part that is not a plain identifier or index makes the whole reference a string literal
    (``model.get_submodule('...')``), so no name ever reaches generated code as code."""
    parts = module.split(".") if module else []
    if not all(p.isdigit() and p.isascii() or is_identifier(p) for p in parts):
        return f"{model}.get_submodule({module!r})"
    ref = model
    for part in parts:
        ref += f"[{part}]" if part.isdigit() else f".{part}"
    return ref


def _indent_of(source_lines: list[str], line: int) -> str:
    if 1 <= line <= len(source_lines):
        text = source_lines[line - 1]
        return text[: len(text) - len(text.lstrip())]
    return ""


def suggest(cause: RootCause | None, findings: list[Finding], data: RunData, script: str | None, limit: int = 5,
            source: str | None = None, module_lines: dict[str, tuple[str, int]] | None = None) -> list[dict[str, Any]]:
    """Fixes for the root cause first (best first), then for the other errors; filled with the script's names.

    ``source`` is the script's current text (an editor's buffer) when it differs from the file;
    ``module_lines`` the modules' current source lines when the editor has moved them."""
    types = {m.name: m.type for m in data.modules}
    sources: dict[str, tuple[str | None, int | None]] = {m.name: (m.file, m.line) for m in data.modules}
    sources.update(module_lines or {})
    wanted: list[tuple[str, str, str]] = []
    if cause is not None:
        wanted.append((cause.kind, cause.module, cause.evidence))
    wanted += [(f.kind, f.module, f.evidence) for f in sorted(findings, key=lambda f: -f.strength) if f.severity == "error"]
    if source is None:
        source = Path(script).read_text(errors="replace") if script else ""
    names = script_names(source) if source else ScriptNames(lines={})
    src_lines = source.splitlines()
    lr = _lr(data)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for kind, module, evidence in wanted:
        candidates = sorted((f for f in library() if f.applies(kind, module, types.get(module), evidence)), key=lambda f: f.rank(evidence))
        for fix in candidates:
            if fix.id in seen:
                continue
            seen.add(fix.id)
            item = render(fix, module, names, src_lines, script, sources.get(module), lr, types.get(module))
            item["module"], item["kind"] = module, kind  # what the fix is for
            out.append(item)
            if len(out) >= limit:
                return out
    return out


def _lr(data: RunData) -> tuple[float | None, float | None]:
    import numpy as np

    lr = data.steps["lr"]
    ok = lr[np.isfinite(lr)]
    if not len(ok):
        return None, None
    return float(ok[-1]), float(ok[0])


SIZE_ATTR = {"Linear": "out_features", "Bilinear": "out_features", "Conv1d": "out_channels", "Conv2d": "out_channels",
             "Conv3d": "out_channels", "Embedding": "embedding_dim", "LayerNorm": "normalized_shape[-1]"}


def render(fix: Fix, module: str, names: ScriptNames, src_lines: list[str], script: str | None,
           module_source: tuple[str | None, int | None] | None, lr: tuple[float | None, float | None],
           module_type: str | None = None) -> dict[str, Any]:
    attr = module.rpartition(".")[2] if module not in ("input", "loss", "optimizer") else ""
    attr = attr if is_identifier(attr) else ""  # (a store's names reach code only as identifiers)
    size = SIZE_ATTR.get(module_type or "")
    # inside the class that creates the layer its size is self.<attr>.<size>; elsewhere it is unknown
    features = f"self.{attr}.{size}" if size and attr and not attr.isdigit() and fix.where == "layer_init" else ""
    values = {
        "model": names.model, "optimizer": names.optimizer, "loss": names.loss, "input": names.input, "target": names.target,
        "module": module, "module_ref": module_ref(names.model, module if module not in ("input", "loss", "optimizer") else ""),
        "features": features or "d_model", "attr": attr or "layer",
        "lr": f"{lr[0]:.3g}" if lr[0] is not None else "?", "lr_before": f"{lr[1]:.3g}" if lr[1] is not None else "1e-3",
        "script": " ".join(str(script or "train.py").split()),  # (into comments: no line breaks)
    }
    snippet = _fill(fix.template, values)
    if "{features}" in fix.template and not features:  # the size is not known: a hint, not code that would fail
        snippet = "\n".join("# " + ln if ln and not ln.lstrip().startswith("#") else ln for ln in snippet.splitlines())
        snippet += "  (set d_model to the layer's output size)"
    where: dict[str, Any] | None = None
    if fix.where == "layer_init" and module_source and module_source[0] and module_source[1]:
        where = {"file": module_source[0], "line": int(module_source[1]) + 1, "position": "before"}
    elif script and names.lines and fix.where in names.lines:
        where = {"file": script, "line": names.lines[fix.where], "position": "before"}
    if where is not None and where["file"] == script:
        indent = _indent_of(src_lines, where["line"] if fix.where in ("before_step", "before_backward", "loss", "data", "before_loop") else where["line"] - 1)
        snippet = "\n".join(indent + ln if ln else ln for ln in snippet.splitlines())
    return {
        "id": fix.id,
        "title": fix.title,
        "snippet": snippet,
        "validation": [_fill(v, values) for v in fix.validation],
        "explanation": fix.explanation,
        "placement": fix.where,
        "where": where,
    }


def _fill(template: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template.replace("{{", "\0").replace("}}", "\1")).replace(
        "\0", "{").replace("\1", "}")
