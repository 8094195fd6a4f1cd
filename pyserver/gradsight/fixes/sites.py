"""Where in the script a module of the run, or an operation a fault is made of, is written: the constructor
call of a layer, the softmax that feeds the loss, the sigmoids inside the network, the dropout rates."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ..script import INPLACE_INIT, Script, dotted, kwarg, number, short
from ..store import UNREGISTERED

if TYPE_CHECKING:
    from ..analysis.data import ModuleInfo
    from .evidence import Context

DROPOUT_TYPES = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"}
DROPOUT_KWARGS = ("p", "dropout", "drop_prob", "dropout_rate", "hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop",
                  "embd_pdrop", "attn_pdrop", "dropout_p", "drop_rate", "attn_dropout", "hidden_dropout", "attention_dropout")


def ctor_of(c: Context, module: str) -> ast.Call | None:
    """The call in the script that creates ``module`` (``nn.Linear(...)`` on its line), or None."""
    i = c.data.index.get(module)
    if i is None or not c.module_in_script(module):
        return None
    m = c.data.modules[i]
    calls = [k for k in c.script.calls if short(k.func) == m.type and k.lineno <= (m.line or 0) <= (k.end_lineno or k.lineno)]
    if len(calls) > 1 and m.site:
        nth = m.site.rsplit("|", 1)[-1]
        fn_name = m.site.split("|", 1)[0].rsplit(".", 1)[-1]
        same = [k for k in c.script.calls if short(k.func) == m.type and (getattr(c.script.function_of(k), "name", "main") == fn_name)]
        if nth.isdigit() and int(nth) < len(same) and same[int(nth)] in calls:
            return same[int(nth)]
    return calls[0] if calls else None


def _last_modules(c: Context, types: set[str]) -> list[str]:
    """Modules of these types that run last in the forward (nothing with parameters after them)."""
    ordered = sorted((m for m in c.data.modules if m.forward_order is not None and m.name), key=lambda m: m.forward_order or 0)
    _, act = c.data.metric("act_mean")
    ran = np.isfinite(act).any(axis=0) if act.size else np.zeros(0, dtype=bool)
    measured = bool(ran.any())

    def after(m: ModuleInfo) -> bool:
        # modules never called go last in the order (an attention's out_proj whose weight is used functionally):
        # when activations were measured, only those that ran come after the output
        return bool(m.own_params) and not (measured and not ran[c.data.index[m.name]])

    out = []
    for k, m in enumerate(ordered):
        if m.type in types and not any(after(n) for n in ordered[k + 1:]):
            out.append(m.name)
    return out


def _loss_inputs(s: Script) -> list[ast.AST]:
    """The expression each loss call gets as its prediction, and what a name there was assigned from in the loop."""
    out: list[ast.AST] = []
    for call in s.loss_calls():
        if not call.args:
            continue
        arg = call.args[0]
        out.append(arg)
        name = dotted(arg)
        if name:
            out += [st.value for st in s.assignments_to(name) if isinstance(st, ast.Assign) and (s.loop is None or s.in_training(st))]
    return out


def _module_call(k: ast.Call) -> bool:
    """``self.sigmoid(h)``: a call of the model's own submodule named like the function (its constructor is the fix's
    place), not the functional ``torch.sigmoid(h)`` or the method ``h.sigmoid()``."""
    return isinstance(k.func, ast.Attribute) and isinstance(k.func.value, ast.Name) and k.func.value.id == "self"


def _output_calls(s: Script, fnames: set[str]) -> list[ast.Call]:
    """Calls of ``fnames`` whose result is what a forward returns, or what the loss is given."""
    out: list[ast.Call] = []
    for fn in [n for n in ast.walk(s.tree) if isinstance(n, ast.FunctionDef)]:
        for r in [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]:
            # (a forward returning several outputs, ``return boxes, scores.softmax(1)``: each of them)
            for v in r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]:
                if (isinstance(v, ast.Call) and short(v.func) in fnames and not _module_call(v)
                        and (fn.name == "forward" or _returns_model_output(s, fn))):
                    out.append(v)
    for e in _loss_inputs(s):
        if isinstance(e, ast.Call) and short(e.func) in fnames and not _module_call(e):
            out.append(e)
    return out


def _returns_model_output(s: Script, fn: ast.FunctionDef) -> bool:
    """A plain function the loop calls to get the prediction (a functional model)."""
    return any(isinstance(e, ast.Call) and short(e.func) == fn.name for e in _loss_inputs(s))


def output_activations(c: Context, names: set[str]) -> list[ast.Call]:
    """Where an activation in ``names`` (``softmax``/``Softmax``) is applied to the network's output."""
    fnames = {n for n in names if n[:1].islower()}
    types = {n for n in names if n[:1].isupper()}
    out = [k for m in _last_modules(c, types) if (k := ctor_of(c, m)) is not None]
    out += _output_calls(c.script, fnames)
    return _unique(out)


def hidden_activations(c: Context, names: set[str]) -> list[ast.Call]:
    """Every place an activation in ``names`` is applied inside the network (not to its output)."""
    fnames = {n for n in names if n[:1].islower()}
    types = {n for n in names if n[:1].isupper()}
    last = set(_last_modules(c, types))
    out = [k for m in c.data.modules if m.type in types and m.name not in last and (k := ctor_of(c, m.name)) is not None]
    outputs = {id(k) for k in _output_calls(c.script, fnames)}
    # a network's functions: forward methods and functions, and those the training loop calls (not the code that
    # makes the data, whose sigmoid shapes the labels)
    per_step = {short(k.func) for k in c.script.calls if c.script.in_training(k)}
    for k in c.script.calls_named(*fnames):
        fn = c.script.function_of(k)
        if fn is not None and (fn.name == "forward" or fn.name in per_step) and id(k) not in outputs:
            out.append(k)
    return _unique(out)


def relu_after(c: Context, module: str) -> list[ast.Call]:
    """The ReLU that follows ``module`` in the forward: its constructor, or an ``F.relu(self.<attr>(...))`` call."""
    i = c.data.index.get(module)
    if i is None:
        return []
    m = c.data.modules[i]
    out = []
    if m.forward_order is not None:
        nxt = [n for n in c.data.modules if n.forward_order == m.forward_order + 1 and n.type == "ReLU"]
        out += [k for n in nxt if (k := ctor_of(c, n.name)) is not None]
    attr = module.rpartition(".")[2]
    for k in c.script.calls_named("relu"):
        if k.args and any(isinstance(x, ast.Call) and short(x.func) == attr for x in ast.walk(k.args[0])):
            out.append(k)
    return _unique(out)


def dropout_sites(c: Context, at_least: float) -> list[ast.AST]:
    """The literal rates (>= ``at_least``) of the dropouts in the script: ``nn.Dropout(0.9)``, ``F.dropout(x, p=0.9)``,
    ``TransformerEncoderLayer(dropout=0.9)``, a config's ``hidden_dropout_prob=0.9`` (through a variable too)."""
    s = c.script
    out: list[ast.AST] = []
    for k in s.calls:
        name = short(k.func)
        cands: list[ast.AST] = [kw.value for kw in k.keywords if kw.arg in DROPOUT_KWARGS and (kw.arg != "p" or "ropout" in name)]
        if name in DROPOUT_TYPES and k.args:
            cands.append(k.args[0])
        if name in ("dropout", "dropout1d", "dropout2d", "alpha_dropout") and len(k.args) >= 2:
            cands.append(k.args[1])
        for v in cands:
            v = _constant_behind(s, v)
            p = number(v)
            if p is not None and at_least <= p <= 1.0:
                out.append(v)
    return _unique(out)


def label_smoothing_sites(c: Context, at_least: float) -> list[ast.AST]:
    """The literal label-smoothing amounts (>= ``at_least``) of the script: ``CrossEntropyLoss(label_smoothing=0.9)``
    (through a variable too), a number assigned once to a name that says smoothing (``label_smoothing = 0.9``,
    a config field), or the default of a ``--label-smoothing`` option."""
    s = c.script
    cands: list[ast.AST] = [_constant_behind(s, kw.value) for k in s.calls for kw in k.keywords if kw.arg == "label_smoothing"]
    for node in ast.walk(s.tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            names = [dotted(t) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
            if any("smooth" in (n or "").lower() for n in names):
                cands.append(node.value)
    for k in s.calls_named("add_argument"):
        flags = [a.value for a in k.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        default = kwarg(k, "default")
        if default is not None and any("smooth" in f.lower() for f in flags):
            cands.append(default.value)
    return _unique([v for v in cands if (x := number(v)) is not None and at_least <= x < 1.0])


def _constant_behind(s: Script, node: ast.AST, depth: int = 0) -> ast.AST:
    """A name's value when it is assigned a number once in the script (``DROPOUT = 0.9``), or when it is a parameter
    of the function (or class constructor) it is used in: the number passed for it where that is called
    (``Block(dim, drop=0.9)``, ``drop=DROPOUT``), else its default (``def __init__(self, ch, p_drop=0.9)``)."""
    name = dotted(node)
    if not name or "." in name:
        return node
    fn = s.function_of(node)
    if fn is not None and name in {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}:
        return (_argument_behind(s, fn, name, depth) if depth < 4 else None) or node
    assigned = [st for st in s.assignments_to(name) if isinstance(st, ast.Assign)]
    if len(assigned) == 1 and number(assigned[0].value) is not None:
        return assigned[0].value
    return node


def _argument_behind(s: Script, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, depth: int) -> ast.AST | None:
    """The number a parameter of ``fn`` gets: a literal (or a module constant) given by keyword where ``fn`` (its class,
    for ``__init__``) is called, else the parameter's default when it is a number."""
    owner = s.class_of(fn)
    callee = owner.name if fn.name == "__init__" and owner is not None else fn.name
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    # (a method's first parameter is bound by the call, not passed)
    offset = 1 if owner is not None and positional and positional[0].arg in ("self", "cls") else 0
    at = next((i - offset for i, a in enumerate(positional) if a.arg == name), None)
    for k in s.calls:
        if short(k.func) != callee:
            continue
        kw = kwarg(k, name)
        given = kw.value if kw is not None else k.args[at] if at is not None and 0 <= at < len(k.args) else None
        if given is None:
            continue
        v = given if number(given) is not None else _constant_behind(s, given, depth + 1)
        return v if number(v) is not None else None  # (a value computed where it is called: not a constant to change)
    defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    value = defaults.get(name)
    return value if value is not None and number(value) is not None else None


def weight_edits(c: Context, module: str) -> list[ast.stmt]:
    """Statements outside the loop that rescale or re-initialise the weights of ``module`` or of a module
    inside it (``self.fc.weight.mul_(30)``, ``nn.init.normal_(model[2].weight, std=5)``)."""
    s = c.script
    inside = [m.name for m in c.data.modules if m.name == module or module and m.name.startswith(module + ".")]
    attrs = {n.rpartition(".")[2] for n in inside if n}
    # .fc.weight, .self_attn.in_proj_weight, [2].bias, params["layer0"].weight, params["layer0"]["weight"]
    alts = [rf"\.{re.escape(a)}\.\w*(weight|bias)\b" for a in attrs if not a.isdigit()]
    alts += [rf"\[{a}\]\.\w*(weight|bias)\b" for a in attrs if a.isdigit()]
    alts += [rf"\[['\"]{re.escape(a)}['\"]\](\.|\[)" for a in attrs]
    pattern = re.compile("|".join(alts)) if alts else None
    out: list[ast.stmt] = []
    for st in ast.walk(s.tree):
        if not isinstance(st, (ast.Expr, ast.Assign, ast.AugAssign)) or s.in_training(st):
            continue
        text = ast.unparse(st)
        if pattern is None or not pattern.search(text):
            continue
        edits = isinstance(st, ast.AugAssign) or any(isinstance(k, ast.Call) and short(k.func) in INPLACE_INIT for k in ast.walk(st))
        edits = edits or (isinstance(st, ast.Assign) and any(short(t) == "data" or isinstance(t, ast.Attribute) and t.attr in ("weight", "bias")
                                                             for t in st.targets))
        if edits:
            out.append(st)
    return sorted(out, key=lambda st: st.lineno)


def _unique(nodes: list[Any]) -> list[Any]:
    seen: set[int] = set()
    out = []
    for n in nodes:
        if id(n) not in seen:
            seen.add(id(n))
            out.append(n)
    return out


__all__ = ["ctor_of", "dropout_sites", "hidden_activations", "kwarg", "output_activations", "relu_after", "weight_edits"]


PLAIN_CONTAINERS = (ast.List, ast.ListComp, ast.Tuple, ast.Dict, ast.DictComp)
REGISTERING = ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict")


def plain_containers(c: Context) -> list[tuple[ast.AST, str]]:
    """Where the run found layers kept in a plain list or dict of a model (its UNREGISTERED warnings): the value
    assigned to ``self.<attribute>`` in the script's class of that name, with the container to use instead (one of
    REGISTERING: the store's word reaches code only from that list)."""
    out: list[tuple[ast.AST, str]] = []
    for e in c.data.events:
        if e.kind != "warning" or e.name != UNREGISTERED:
            continue
        attr, owner = str(e.data.get("attribute", "")), str(e.data.get("owner", ""))
        use = str(e.data.get("use", "")).rpartition(".")[2]
        if use not in REGISTERING:
            continue
        for node in ast.walk(c.script.tree):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and dotted(node.targets[0]) == f"self.{attr}"):
                continue
            cls = c.script.class_of(node)
            value = node.value
            plain = isinstance(value, PLAIN_CONTAINERS) or (
                isinstance(value, ast.Call) and dotted(value.func) in ("list", "tuple", "dict") and len(value.args) <= 1)
            # (two instances of one class, each with its list, are one assignment in the script)
            if cls is not None and cls.name == owner and plain and all(v is not value for v, _ in out):
                out.append((value, use))
    return out
