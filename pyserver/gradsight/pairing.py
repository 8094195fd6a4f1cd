"""Where a script breaks the pairing of its inputs and labels, read with ``ast``.

Labels that carry no signal are most often labels taken apart from their inputs: one permutation for the inputs
and another for the labels, a batch's inputs by a shuffled index and its labels by a running slice, a shuffle of
some of the arrays a dataset is made of but not the others. Each finding is a :class:`Repair`: the expressions to
rewrite (or the statement to remove) so that every array is taken by the same index again.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .script import Script, dotted, short

# calls that make an order of indices (a random sample by randint is as often the data itself: random labels)
PERM_CALLS = {"randperm", "permutation", "argsort"}
# calls that put arrays together as one dataset's columns
GROUPING_CALLS = {"TensorDataset", "zip"}


@dataclass
class Repair:
    stmt: ast.stmt  # the statement that breaks the pairing
    note: str
    rewrites: list[tuple[ast.AST, str]] = field(default_factory=list)  # expression -> its new source
    hoist: str = ""  # a statement put before ``stmt`` (one permutation both arrays share)
    delete: bool = False


def _pairs(n: ast.Assign) -> list[tuple[ast.expr, ast.expr]]:
    """Each target of a one-target assignment with its value: ``a, b = x, y`` element by element."""
    t, v = n.targets[0], n.value
    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
        return list(zip(t.elts, v.elts))
    return [(t, v)]


def _perm_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and short(node.func) in PERM_CALLS


INDEX_WRAPPERS = {"split", "chunk", "tensor_split", "as_tensor", "tensor", "from_numpy", "array", "list", "tolist", "to", "long"}


def _is_perm(node: ast.AST, perms: set[str]) -> bool:
    """An expression that is a random order of indices or a part of one."""
    if isinstance(node, ast.Name):
        return node.id in perms
    if isinstance(node, ast.Subscript):
        return _is_perm(node.value, perms)
    if isinstance(node, ast.Call):
        if short(node.func) in PERM_CALLS:
            return True
        if isinstance(node.func, ast.Attribute) and _is_perm(node.func.value, perms):
            return True  # perm.split(bs), torch.randperm(n).tolist()
        return short(node.func) in INDEX_WRAPPERS and bool(node.args) and _is_perm(node.args[0], perms)
    return False


def _perm_names(s: Script) -> set[str]:
    """Names bound to a random order of indices, or to a part of one (``idx = perm[i:i + bs]``), or that a loop
    takes from one (``for idx in perm.split(bs)``)."""
    out: set[str] = set()
    for _ in range(3):  # a few hops: perm -> chunk -> idx
        for n in ast.walk(s.tree):
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                pairs = _pairs(n)
            elif isinstance(n, (ast.For, ast.comprehension)):
                pairs = [(n.target, n.iter)]
            for t, v in pairs:
                if isinstance(t, ast.Name) and _is_perm(v, out):
                    out.add(t.id)
                elif (isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[1], ast.Name)
                      and isinstance(v, ast.Call) and short(v.func) == "sort"):
                    out.add(t.elts[1].id)  # ``values, order = lengths.sort()``: the order is an index
    return out


def _core(node: ast.expr) -> ast.expr:
    """The array an expression takes, through the methods called on it: ``x[idx]`` of ``x[idx].clamp(0, 1).float()``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, (ast.Subscript, ast.Call)):
        node = node.func.value
    return node


def _is_slice_by_running_bound(node: ast.AST) -> bool:
    """``i:i + bs`` or ``:N``: a contiguous slice (not a tuple of slices over several axes)."""
    return isinstance(node, ast.Slice)


def _array_like(s: Script, name: str, scope: ast.AST) -> bool:
    """A bare name in ``scope`` that holds an array: bound there from an expression that is not a constant, or
    subscripted somewhere in the script."""
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            if not isinstance(n.value, ast.Constant):
                return True
        if isinstance(n, ast.Subscript) and dotted(n.value) == name:
            return True
    return False


def _mixed_tuples(s: Script, perms: set[str]) -> list[Repair]:
    """``x[perm], y`` / ``x[idx], y[i:i + bs]`` / ``x[torch.randperm(n)], y[torch.randperm(n)]`` in one tuple."""
    out: list[Repair] = []
    for n in ast.walk(s.tree):
        if not (isinstance(n, (ast.Assign, ast.Return)) and isinstance(n.value, ast.Tuple) and len(n.value.elts) >= 2):
            continue
        elts = [_core(e) for e in n.value.elts]
        subs = [e for e in elts if isinstance(e, ast.Subscript) and dotted(e.value)]
        calls = [e for e in subs if _perm_call(e.slice)]
        if len(calls) >= 2 and len({s.segment(e.slice) for e in calls}) == 1:
            # the same call written twice draws two orders
            first = s.segment(calls[0].slice)
            out.append(Repair(n, "one permutation for every array", [(e.slice, "_perm") for e in calls], f"_perm = {first}"))
            continue
        named = {dotted(e.slice) for e in subs if dotted(e.slice) in perms and dotted(e.slice)}
        if len(named) != 1:
            continue
        index = next(iter(named))
        if {e.id for e in elts if isinstance(e, ast.Name)} & {dotted(e.value) for e in subs}:
            continue  # ``y, y[idx]`` side by side: both orders are meant (mixup)
        scope = s.function_of(n) or s.tree
        rewrites: list[tuple[ast.AST, str]] = []
        for e in elts:
            if isinstance(e, ast.Subscript) and dotted(e.value) and _is_slice_by_running_bound(e.slice):
                if dotted(e.value) not in perms:
                    rewrites.append((e.slice, index))
            elif isinstance(e, ast.Name) and e.id not in perms and _array_like(s, e.id, scope):
                rewrites.append((e, f"{e.id}[{index}]"))
        if rewrites:
            out.append(Repair(n, f"every array taken by {index}", rewrites))
    return out


def _loop_slices(s: Script, perms: set[str]) -> list[Repair]:
    """In one loop body, some arrays taken by a shuffled index and another by a running slice of the loop
    (``model(x[idx])`` and ``loss(out, y[b * B:(b + 1) * B])``)."""
    out: list[Repair] = []
    for loop in ast.walk(s.tree):
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        body = [x for st in loop.body for x in ast.walk(st) if not isinstance(st, (ast.For, ast.While, ast.FunctionDef))]
        by_index: dict[str, set[str]] = {}
        sliced: list[ast.Subscript] = []
        for x in body:
            if isinstance(x, ast.Subscript) and dotted(x.value):
                if dotted(x.slice) in perms and dotted(x.slice):
                    by_index.setdefault(dotted(x.slice), set()).add(dotted(x.value))
                elif isinstance(x.slice, ast.Slice) and dotted(x.value) not in perms:
                    bounds = [b for b in (x.slice.lower, x.slice.upper) if b is not None]
                    if any(isinstance(v, ast.Name) for b in bounds for v in ast.walk(b)):
                        sliced.append(x)
        if len(by_index) != 1:
            continue
        index, taken = next(iter(by_index.items()))
        for x in sliced:
            if dotted(x.value) not in taken:
                out.append(Repair(s.stmt_of(x), f"{dotted(x.value)} taken by {index} like the other arrays", [(x.slice, index)]))
    return out


Key = tuple[int, str]  # (the id of the function a name is bound in, or 0 at module level; the name)


def _roots(s: Script) -> dict[Key, set[Key]]:
    """Each name of each scope and the names its values were computed from (transitively). A function's own
    names are its own: a local ``user`` is not the module's."""
    def scope(n: ast.AST) -> int:
        f = s.function_of(n)
        return id(f) if f is not None else 0

    bound: set[Key] = set()
    assigns: list[tuple[int, ast.expr, ast.expr]] = []
    for n in ast.walk(s.tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            for tt, vv in _pairs(n):
                assigns.append((scope(n), tt, vv))
                bound |= {(scope(n), x.id) for x in ast.walk(tt) if isinstance(x, ast.Name)}

    def key(sc: int, name: str) -> Key:
        return (sc, name) if (sc, name) in bound else (0, name)

    roots: dict[Key, set[Key]] = {}
    for sc, t, v in assigns:
        used = {key(sc, x.id) for x in ast.walk(v) if isinstance(x, ast.Name)}
        for x in ast.walk(t):
            if isinstance(x, ast.Name):
                k = key(sc, x.id)
                roots.setdefault(k, {k}).update(used)
    for _ in range(6):
        changed = False
        for got in roots.values():
            more = set().union(*(roots.get(u, {u}) for u in got)) - got
            if more:
                got |= more
                changed = True
        if not changed:
            break
    return roots


def _groups(s: Script) -> list[tuple[int, list[str]]]:
    """The arrays a dataset is made of: the names given to ``TensorDataset``/``zip`` or to a ``Dataset`` class of
    the script, with the scope they are named in."""
    datasets = {c.name for c in ast.walk(s.tree) if isinstance(c, ast.ClassDef)
                and any("Dataset" in (dotted(b) or "") for b in c.bases)}
    bound = {x.id for n in ast.walk(s.tree) if isinstance(n, ast.Assign) for t in n.targets for x in ast.walk(t)
             if isinstance(x, ast.Name)}
    out: list[tuple[int, list[str]]] = []
    for c in s.calls:
        if short(c.func) in GROUPING_CALLS or short(c.func) in datasets:
            # each argument by the first array it is made from (``torch.from_numpy(x).unsqueeze(1)``: x)
            names = [n for n in (next((x.id for x in ast.walk(a) if isinstance(x, ast.Name) and x.id in bound), "") for a in c.args) if n]
            if len(names) >= 2:
                f = s.function_of(c)
                out.append((id(f) if f is not None else 0, names))
    return out


def _partial_reorders(s: Script, perms: set[str]) -> list[Repair]:
    """``a, b = a[p], b[p]`` that reorders some of a dataset's arrays and not the others."""
    groups = _groups(s)
    if not groups:
        return []
    roots = _roots(s)
    out: list[Repair] = []
    for n in ast.walk(s.tree):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1):
            continue
        pairs = _pairs(n)
        f = s.function_of(n)
        sc = id(f) if f is not None else 0
        moved: set[Key] = set()
        for t, v in pairs:
            reordered = isinstance(v, ast.Subscript) and (_perm_call(v.slice) or dotted(v.slice) in perms and dotted(v.slice))
            sorted_ = (isinstance(v, ast.Call) and short(v.func) in ("sort", "sorted") and bool(v.args)
                       and isinstance(v.args[0], ast.Name) and isinstance(t, ast.Name) and v.args[0].id == t.id)
            if not (isinstance(t, ast.Name) and (reordered and dotted(v.value) == t.id or sorted_)):  # type: ignore[attr-defined]
                moved = set()
                break
            moved.add((sc, t.id) if (sc, t.id) in roots else (0, t.id))
        if not moved:
            continue
        for gsc, g in groups:
            keys = [(gsc, m) if (gsc, m) in roots else (0, m) for m in g]
            hit = [m for m, k in zip(g, keys) if roots.get(k, {k}) & moved]
            if hit and len(hit) < len(g):
                names = ", ".join(sorted(k[1] for k in moved))
                out.append(Repair(n, f"{names} reordered and {', '.join(m for m in g if m not in hit)} not", delete=True))
                break
    return out


def _lone_sorted_orders(s: Script, perms: set[str]) -> list[Repair]:
    """``lengths, order = lengths.sort(); toks = toks[order]`` and nothing else taken by that order: the tokens are
    reordered, their tags are not."""
    uses: dict[str, int] = {}
    for n in ast.walk(s.tree):
        if isinstance(n, ast.Subscript) and dotted(n.slice) in perms:
            uses[dotted(n.slice)] = uses.get(dotted(n.slice), 0) + 1
    sorted_orders = {t.elts[1].id for n in ast.walk(s.tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
                     for t in [n.targets[0]] if isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[1], ast.Name)
                     and isinstance(n.value, ast.Call) and short(n.value.func) == "sort"}
    out: list[Repair] = []
    for n in ast.walk(s.tree):
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Subscript) and dotted(n.value.value) == n.targets[0].id
                and dotted(n.value.slice) in sorted_orders and uses.get(dotted(n.value.slice)) == 1):
            out.append(Repair(n, f"{n.targets[0].id} keeps the order of the arrays it goes with", delete=True))
    return out


def _inline_perms(s: Script) -> list[Repair]:
    """``y = ids[1:][torch.randperm(n)]`` beside ``x = ids[:-1]``: one of two arrays cut from the same source is
    shuffled on its way."""
    out: list[Repair] = []
    assigns = [n for n in ast.walk(s.tree) if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)]
    for n in assigns:
        target = n.targets[0].id  # type: ignore[attr-defined]
        for x in ast.walk(n.value):
            if not (isinstance(x, ast.Subscript) and _perm_call(x.slice)) or dotted(x.value) == target:
                continue
            src = x.value
            while isinstance(src, ast.Subscript):
                src = src.value
            base = src.id if isinstance(src, ast.Name) else ""
            scope = s.function_of(n)
            twins = [m for m in assigns if m is not n and s.function_of(m) is scope and m.targets[0].id != target  # type: ignore[attr-defined]
                     and any(isinstance(v, ast.Subscript) and dotted(v.value) == base for v in ast.walk(m.value))
                     and not any(_perm_call(v) for v in ast.walk(m.value))]
            if base and twins:
                out.append(Repair(n, f"{target} keeps the order of {base}, like {twins[0].targets[0].id}",  # type: ignore[attr-defined]
                                  [(x, s.segment(x.value))]))
                break
    return out


def repairs(s: Script) -> list[Repair]:
    """Every place the script takes inputs and labels apart, each once (by statement)."""
    if not s.ok:
        return []
    perms = _perm_names(s)
    out: list[Repair] = []
    seen: set[int] = set()
    for r in (_mixed_tuples(s, perms) + _loop_slices(s, perms) + _partial_reorders(s, perms) + _inline_perms(s)
                  + _lone_sorted_orders(s, perms) + _reordered_after_use(s, perms) + _zipped_loaders(s)
                  + _fresh_beside_taken(s)):
        if id(r.stmt) not in seen:
            seen.add(id(r.stmt))
            out.append(r)
    return out


# reductions: what they give keeps no row of the array (``mu = x.mean(0)`` is not reordered with ``x``)
UNALIGNED = {"mean", "std", "var", "sum", "max", "min", "norm", "median", "amax", "amin", "item", "size", "numel", "len",
             "count_nonzero", "quantile", "nanmean", "unique", "bincount", "shape", "dim", "ndim", "dtype", "device", "float"}


def _aligned_uses(s: Script, node: ast.AST, names: set[str]) -> set[str]:
    """The names of ``names`` that ``node`` reads row by row: not only inside a reduction or a shape."""
    out: set[str] = set()
    for x in ast.walk(node):
        if not (isinstance(x, ast.Name) and x.id in names and isinstance(x.ctx, ast.Load)):
            continue
        chain: list[ast.AST] = [x]
        for a in s.ancestors(x):
            chain.append(a)
            if a is node:
                break
        reduced = False
        for inner, outer in zip(chain, chain[1:]):
            if isinstance(outer, ast.Attribute) and outer.value is inner and outer.attr in UNALIGNED:
                reduced = True
            elif isinstance(outer, ast.Call) and inner in outer.args and short(outer.func) in UNALIGNED:
                reduced = True
        if not reduced:
            out.add(x.id)
    return out


def _self_reorder(n: ast.Assign, perms: set[str]) -> tuple[set[str], str] | None:
    """``a = a[o]`` / ``a, b = a[o], b[o]`` by one order: the names reordered and the order ("" for one drawn inline)."""
    moved: set[str] = set()
    orders: set[str] = set()
    for t, v in _pairs(n):
        if not (isinstance(t, ast.Name) and isinstance(v, ast.Subscript) and dotted(v.value) == t.id):
            return None
        if _perm_call(v.slice):
            orders.add("")
        elif dotted(v.slice) in perms and dotted(v.slice):
            orders.add(dotted(v.slice))
        else:
            return None
        moved.add(t.id)
    return (moved, next(iter(orders))) if len(orders) == 1 else None


def _reordered_after_use(s: Script, perms: set[str]) -> list[Repair]:
    """``target = f(x)`` and then ``x = x[order]``, with ``target`` and ``x`` used together afterwards: the arrays
    computed from ``x`` before it was reordered keep the old order (a sort "so that similar sizes are adjacent", a
    second shuffle of the labels after the features were made from them)."""
    out: list[Repair] = []
    scopes: dict[int, list[ast.stmt]] = {}
    for n in ast.walk(s.tree):
        if isinstance(n, (ast.Assign, ast.Expr, ast.Return, ast.AugAssign)):
            f = s.function_of(n)
            scopes.setdefault(id(f) if f is not None else 0, []).append(n)
    for stmts in scopes.values():
        stmts.sort(key=lambda x: (x.lineno, x.col_offset))
        for n in stmts:
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1):
                continue
            got = _self_reorder(n, perms)
            if got is None or s.loops_around(n):
                continue  # (a reorder in a loop runs again before each use: its order is the loop's own)
            moved, order = got
            if order:  # every array the same named order takes, wherever in this scope
                for m in stmts:
                    other = _self_reorder(m, perms) if isinstance(m, ast.Assign) and len(m.targets) == 1 else None
                    if other and other[1] == order:
                        moved |= other[0]
            line = n.lineno
            # arrays computed row by row from the moved ones before the reorder, and not reordered themselves
            stale: set[str] = set()
            for m in stmts:
                if m.lineno >= line or not isinstance(m, ast.Assign) or s.loops_around(m):
                    continue
                names = {x.id for t in m.targets for x in ast.walk(t) if isinstance(x, ast.Name)}
                if names & (moved | perms) or not _aligned_uses(s, m.value, moved | stale):
                    continue
                stale |= names
            stale -= moved
            if not stale:
                continue
            # used together afterwards: one statement reads a stale array's descendants and a moved one's
            later = sorted((m for st in scopes.values() for m in st if m.lineno > line), key=lambda x: x.lineno)
            new, old = set(moved), set(stale)
            for m in later:
                if isinstance(m, ast.Assign):
                    names = {x.id for t in m.targets for x in ast.walk(t) if isinstance(x, ast.Name)}
                    a, b = _aligned_uses(s, m.value, new), _aligned_uses(s, m.value, old)
                    if a and b:
                        break
                    if a:
                        new |= names
                        old -= names
                    elif b:
                        old |= names
                        new -= names
                    else:
                        new -= names
                        old -= names
                elif _aligned_uses(s, m, new) and _aligned_uses(s, m, old):
                    break
            else:
                continue
            out.append(Repair(n, f"{', '.join(sorted(moved))} reordered after {', '.join(sorted(stale))} {'was' if len(stale) == 1 else 'were'} "
                                 "made from them, and not those", delete=True))
    return out


def _zipped_loaders(s: Script) -> list[Repair]:
    """``zip(x_loader, y_loader)`` over two loaders that each shuffle on their own: every batch pairs inputs with
    another batch's labels. The first loader is made to take its datasets together (``StackDataset``, which yields
    what the zip did) and the loop takes that loader alone."""
    loaders: dict[str, ast.Call] = {}
    for n in ast.walk(s.tree):
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and isinstance(n.value, ast.Call) and short(n.value.func) == "DataLoader"):
            loaders[n.targets[0].id] = n.value
    out: list[Repair] = []
    for c in s.calls_named("zip"):
        found = [a if isinstance(a, ast.Call) and short(a.func) == "DataLoader" else loaders.get(dotted(a)) for a in c.args]
        made = [x for x in found if x is not None and x.args]
        if len(made) < 2 or len(made) < len(found):
            continue
        if sum(_shuffles(x) for x in made) < 2 or any(kw.arg in ("sampler", "batch_sampler") for x in made for kw in x.keywords):
            continue
        rewrites: list[tuple[ast.AST, str]] = []
        if _imports_torch(s):
            first = made[0]
            stacked = f"torch.utils.data.StackDataset({', '.join(s.segment(x.args[0]) for x in made)})"
            if first is c.args[0]:  # the loader made in the zip itself
                rewrites = [(c, s.segment(first).replace(s.segment(first.args[0]), stacked, 1))]
            else:
                rewrites = [(first.args[0], stacked), (c, s.segment(c.args[0]))]
        out.append(Repair(s.stmt_of(c), "loaders that shuffle each on its own, zipped", rewrites))
    return out


def _imports_torch(s: Script) -> bool:
    """``import torch`` at the top level, unrenamed: ``torch.`` names the package in code put into the script."""
    return any(isinstance(n, ast.Import) and any(a.name == "torch" and not a.asname for a in n.names) for n in s.tree.body)


def _shuffles(call: ast.Call) -> bool:
    kw = next((k for k in call.keywords if k.arg == "shuffle"), None)
    return kw is not None and not (isinstance(kw.value, ast.Constant) and not kw.value.value)


def _fresh(node: ast.AST) -> bool:
    """A random order drawn on the spot, or a part of one: ``rng.permutation(n)[:bs]``."""
    return _perm_call(node) or (isinstance(node, ast.Subscript) and _perm_call(node.value))


def _fresh_beside_taken(s: Script) -> list[Repair]:
    """``users, pos = chunk[:, 0], pairs[rng.permutation(n)[:bs], 1]`` where ``chunk = pairs[order[i:j]]``: two
    columns of one array, one taken by the batch's order and one by an order drawn on the spot. The second is taken
    by the batch's order too."""
    out: list[Repair] = []
    for n in ast.walk(s.tree):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Tuple)):
            continue
        elts = [_core(e) for e in n.value.elts]
        scope = s.function_of(n)
        for e in elts:
            if not (isinstance(e, ast.Subscript) and dotted(e.value)):
                continue
            # (a column of paired rows: whole rows drawn at random beside a batch are negatives sampled on purpose)
            if not (isinstance(e.slice, ast.Tuple) and len(e.slice.elts) == 2 and _fresh(e.slice.elts[0])):
                continue
            first, column = e.slice.elts
            base = dotted(e.value)
            for o in elts:
                name = dotted(o.value) if isinstance(o, ast.Subscript) else ""
                if (o is e or not name or name == base or not isinstance(o, ast.Subscript) or not isinstance(o.slice, ast.Tuple)
                        or len(o.slice.elts) != 2 or s.segment(o.slice.elts[1]) == s.segment(column)):
                    continue
                made = [a for a in s.assignments_to(name) if isinstance(a, ast.Assign) and s.function_of(a) is scope
                        and a.lineno <= n.lineno and isinstance(a.value, ast.Subscript) and dotted(a.value.value) == base]
                if made and not _fresh(made[-1].value.slice):  # type: ignore[attr-defined]
                    order = s.segment(made[-1].value.slice)  # type: ignore[attr-defined]
                    out.append(Repair(n, f"{base} taken by {order} and by an order drawn on the spot", [(first, order)]))
                    break
            else:
                continue
            break
    return out
