"""Where a non-finite loss came from, read off its autograd graph before ``backward()`` frees it.

The user's forward is never run again. Instead, when the loss of a backward call is NaN/Inf, the
graph that produced it is still there, with the tensors PyTorch saved for the backward pass: the
earliest graph node holding a non-finite saved tensor marks where the first NaN/Inf was made. Each
module's output node is remembered with the module's id (:class:`Tags`, from the global forward hook),
so the nearest tagged node at or after that point names the module whose output first went non-finite;
a point after every module's output is the loss itself, and a non-finite leaf that is not a parameter
is the input batch.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

MAX_CALLS = 4  # top-level module calls whose output nodes are held, at most, until a backward consumes them
MAX_NODES = 50_000  # a graph walk stops here (a very large graph is searched in part)
# ops whose saved result is non-finite only when their input already was (the NaN came from before them)
PASS_THROUGH = frozenset({"ReluBackward0", "SigmoidBackward0", "TanhBackward0", "ThresholdBackward0", "HardtanhBackward0",
                          "LeakyReluBackward0", "EluBackward0", "CloneBackward0", "ViewBackward0", "SoftmaxBackward0",
                          "LogSoftmaxBackward0", "Relu6Backward0", "HardsigmoidBackward0"})
INPUT = -1  # the origin is the input batch
LOSS = -2  # the origin is after every module's output: the loss


class Tags:
    """The graph node of each module output of the forward passes since the last backward, with id() of its module.

    The nodes are held (a node object is made anew each time it is looked up unless one is alive), so that a walk
    of the graph meets these very objects: a lookup is by identity. Holding costs a list append per module call,
    where marking the node itself (its ``metadata`` dict) costs PyTorch an allocation per node, a few % of a
    small model's step. A backward's end lets them go, and at most :data:`MAX_CALLS` top-level calls are held: a
    forward without a backward (an evaluation with gradients on) keeps no more than that alive past its time.
    """

    def __init__(self) -> None:
        self._calls: deque[dict[int, tuple[Any, int]]] = deque([{}], maxlen=MAX_CALLS)

    def top_call(self) -> None:
        """A top-level module call starts: a new forward pass (the oldest held is let go past the bound)."""
        if self._calls[-1]:
            self._calls.append({})

    def hold(self, fn: Any, module_id: int) -> None:
        """Remember a module output's graph node (the innermost module, called first, keeps it)."""
        held = self._calls[-1]
        key = id(fn)
        if key not in held:
            held[key] = (fn, module_id)

    def tag(self, output: Any, module: object) -> None:
        """Remember the graph node of a module's output, if it has one."""
        fn = getattr(output, "grad_fn", None)
        if fn is not None:
            self.hold(fn, id(module))

    def module_of(self, node: Any) -> int | None:
        key = id(node)
        for held in self._calls:
            entry = held.get(key)
            if entry is not None and entry[0] is node:
                return entry[1]
        return None

    def clear(self) -> None:
        self._calls.clear()
        self._calls.append({})


def _saved(node: Any) -> list[tuple[str, torch.Tensor]]:
    out: list[tuple[str, torch.Tensor]] = []
    for name in dir(node):
        if not name.startswith("_saved_"):
            continue
        try:
            value = getattr(node, name)
        except (RuntimeError, AttributeError):  # freed, or not saved for this call
            continue
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel():
                out.append((name, t))
    return out


def _bad(t: torch.Tensor) -> bool:
    return not bool(torch.isfinite(t).all())


def origin(loss: torch.Tensor, index: dict[int, int], tags: Tags, rank: dict[int, int] | None = None) -> int | None:
    """The id of the module whose output first went non-finite, :data:`INPUT`, :data:`LOSS`, or None
    when the loss has no graph. ``index`` maps id() of each module to its module id; ``rank``: each module's
    place in the forward pass, to choose the first of several; ``tags``: the module output nodes."""
    root = loss.grad_fn
    if root is None:
        return None
    nodes: dict[int, Any] = {id(root): root}
    producers: dict[int, list[int]] = {}
    consumers: dict[int, list[int]] = {}
    queue = deque([root])
    while queue and len(nodes) < MAX_NODES:
        node = queue.popleft()
        ps: list[int] = []
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is None:
                continue
            key = id(nxt)
            ps.append(key)
            consumers.setdefault(key, []).append(id(node))
            if key not in nodes:
                nodes[key] = nxt
                queue.append(nxt)
        producers[id(node)] = ps
    bad_result: set[int] = set()
    bad_input: set[int] = set()
    bad_data: set[int] = set()  # a non-finite saved input that no op made: data (the batch, a buffer)
    # the producers a node's non-finite saved inputs came from (a parameter's own node: the parameter itself)
    carriers: dict[int, list[int]] = {}
    for key, node in nodes.items():
        if type(node).__name__ == "AccumulateGrad":
            continue
        for name, t in _saved(node):
            if _bad(t):
                if name.startswith("_saved_result"):
                    bad_result.add(key)
                else:
                    bad_input.add(key)
                    if t.grad_fn is None and not t.requires_grad:
                        bad_data.add(key)
                    elif t.grad_fn is None:  # a parameter, saved as it is: its output is the first non-finite one
                        carriers.setdefault(key, []).append(key)
                    elif id(t.grad_fn) in nodes:
                        carriers.setdefault(key, []).append(id(t.grad_fn))
    bad = bad_result | bad_input
    if not bad:
        return LOSS  # nothing saved is non-finite: the first NaN/Inf was made after the last saved tensor, in the loss
    # nodes with something non-finite upstream of them (memoised over the DAG, iteratively)
    up: dict[int, bool] = {}
    for start in bad:
        stack = [(start, False)]
        while stack:
            key, done = stack.pop()
            if key in up:
                continue
            if done:
                up[key] = any(p in bad or up.get(p, False) for p in producers.get(key, ()))
                continue
            stack.append((key, True))
            stack.extend((p, False) for p in producers.get(key, ()) if p not in up)
    earliest = [k for k in bad if not up.get(k, False)]
    found: list[int] = []
    for key in earliest:
        node = nodes[key]
        if key in bad_data:
            found.append(INPUT)
            continue
        if key in bad_result and key not in bad_input and type(node).__name__ not in PASS_THROUGH:
            starts = [key]  # this op made the non-finite value from finite inputs
        else:
            # from the inputs that carried the non-finite values when they are known (not a clean branch beside them)
            starts = carriers.get(key) or [p for p in producers.get(key, ()) if type(nodes[p]).__name__ != "AccumulateGrad"]
            if not starts:  # a non-finite leaf that no parameter holds: the batch
                found.append(INPUT)
                continue
        found.append(_nearest_tag(starts, nodes, consumers, index, tags))
    modules = [f for f in found if f >= 0]
    if modules:
        return min(modules, key=lambda m: (rank or {}).get(m, m))
    return INPUT if INPUT in found else LOSS


def _nearest_tag(starts: list[int], nodes: dict[int, Any], consumers: dict[int, list[int]], index: dict[int, int], tags: Tags) -> int:
    """The module id on the nearest tagged node at or after ``starts`` (toward the loss); LOSS if none."""
    seen = set(starts)
    queue = deque(starts)
    while queue:
        key = queue.popleft()
        node = nodes.get(key)
        module = tags.module_of(node) if node is not None else None
        if module is not None and module in index:
            return index[module]
        for c in consumers.get(key, ()):
            if c not in seen:
                seen.add(c)
                queue.append(c)
    return LOSS


class BackwardProbe:
    """Where a backward pass makes non-finite gradients from finite ones (a custom ``autograd.Function``, a
    ``sqrt`` of zero): on one step, the gradient reaching each module's output is looked at as it passes.
    Backward runs from the loss to the input, so the module that made them is the one after, in forward
    order, the last module whose output's gradient is non-finite: it got a finite gradient and passed back
    an infinite one. Costs one check per module output, on that step only."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.finite: dict[int, bool] = {}  # module id -> its output's gradient was finite

    def watch(self, module_id: int, output: torch.Tensor) -> None:
        def seen(grad: torch.Tensor) -> None:
            ok = bool(torch.isfinite(grad).all())
            self.finite[module_id] = self.finite.get(module_id, True) and ok

        output.register_hook(seen)

    def origin(self, rank: dict[int, int]) -> int | None:
        """The module whose backward made the first non-finite gradient, None when every gradient seen was finite."""
        order = sorted(self.finite, key=lambda m: rank.get(m, m))
        bad = [k for k, m in enumerate(order) if not self.finite[m]]
        if not bad:
            return None
        after = bad[-1] + 1
        return order[after] if after < len(order) else order[bad[-1]]
