"""The script's usual names (model, optimizer, loss, batch) and lines, found with ``ast``: where the editor
puts a finding of the optimizer, the loss or the input."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .script import OPTIMIZERS


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


