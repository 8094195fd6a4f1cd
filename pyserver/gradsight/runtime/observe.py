"""What a measured step's functions are given: the loss's inputs and targets, attention distributions, dropout rates.

These are the evidence of faults that no gradient statistic shows: probabilities fed to a loss that applies
softmax or sigmoid itself, targets of the wrong kind or shape for the loss, a summed loss, attention that
collapses onto one key, a dropout rate that drops most units. PyTorch's loss functions, ``softmax``,
``scaled_dot_product_attention`` and ``dropout`` are wrapped while a session runs; on a measured step
(the same ones as the activation statistics) each call adds a few small reductions, on other steps the
wrapper only checks a flag. The module running at the time names where a call happened.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

LOSSES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
          "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss", "gaussian_nll_loss", "ctc_loss")
MAX_DISTINCT = 32  # distinct target values counted, at most
ATTENTION_SAMPLES = 4  # batch rows whose attention is measured on a measured step
ATTENTION_BYTES = 2 * 2**20  # per attention map kept as a tensor
MAX_PENDING = 8  # functional sigmoids followed to the module they feed, per measured step
MAX_GRAPH = 20_000  # graph nodes walked, at most, to find what a pending output fed
# ops between a parameter and the op that takes it (F.linear's transpose, a reshape, autocast's cast)
_PARAM_PATH = frozenset({"TBackward0", "TransposeBackward0", "PermuteBackward0", "ViewBackward0", "ReshapeAliasBackward0",
                         "UnsafeViewBackward0", "ExpandBackward0", "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1",
                         "ToCopyBackward0", "SelectBackward0", "SliceBackward0"})


_SOFTMAX = torch.softmax  # (gradsight's own: not the wrapper below)


def _compiling() -> bool:
    return torch.compiler.is_compiling()


class Observer:
    """Gathers a measured step's observations; the session writes them with the step."""

    def __init__(self, current_module: Callable[[], int | None], running_type: Callable[[], str] = lambda: "",
                 model_args: Callable[[], tuple[Any, ...]] = lambda: ()) -> None:
        self.armed = False
        self.keep_maps = False  # keep attention maps as tensors too (the first measured step, a capture)
        self.rows: list[tuple[str, int | None, dict[str, Any]]] = []  # (kind, module id, data)
        self.maps: list[tuple[int | None, torch.Tensor]] = []  # (module id, probabilities [B, H, Q, K])
        self._current = current_module
        self._type = running_type  # the class name of the innermost module running now
        self._model_args = model_args  # the positional arguments of the model call running now
        self._restore: list[Callable[[], None]] = []
        self._seen: set[tuple[str, int | None]] = set()  # one observation of a kind per module and step
        # an F.dropout or sigmoid called in a forward, not by its module: its output, to name the module it feeds
        self.pending: list[tuple[dict[str, Any], Any]] = []
        self.sigmoids = 0  # functional sigmoids followed on this measured step
        self.failed = False

    # -- installation --------------------------------------------------------
    def install(self) -> None:
        for name in LOSSES:
            original = getattr(F, name, None)
            if original is not None:
                self._patch(F, name, self._wrap_loss(name, original))
        self._patch(F, "softmax", self._wrap_softmax(F.softmax))
        self._patch(torch, "softmax", self._wrap_softmax(torch.softmax))
        self._patch(torch.Tensor, "softmax", self._wrap_softmax(torch.Tensor.softmax))
        self._patch(F, "scaled_dot_product_attention", self._wrap_sdpa(F.scaled_dot_product_attention))
        self._patch(F, "dropout", self._wrap_dropout(F.dropout))
        self._patch(torch, "sigmoid", self._wrap_sigmoid(torch.sigmoid))
        self._patch(torch.Tensor, "sigmoid", self._wrap_sigmoid(torch.Tensor.sigmoid))

    def remove(self) -> None:
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()

    def _patch(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        original = getattr(owner, name)
        setattr(owner, name, wrapper)
        self._restore.append(functools.partial(setattr, owner, name, original))

    def arm(self, keep_maps: bool) -> None:
        self.armed, self.keep_maps = not self.failed, keep_maps
        self._seen = set()
        self.sigmoids = 0

    def _in_dropout_module(self) -> bool:
        return self._type().startswith("Dropout")

    def fed(self, module: int | None, args: Any) -> None:
        """A module starts: when its input is a pending F.dropout's or sigmoid's output, that call feeds it."""
        if not self.pending or module is None:
            return
        given = args if isinstance(args, tuple) else (args,)
        for entry in list(self.pending):
            if any(a is entry[1] for a in given):
                entry[0]["feeds"] = module
                self.pending.remove(entry)

    def fed_by_graph(self, loss: torch.Tensor, owner: Callable[[torch.Tensor], int | None]) -> None:
        """Pending outputs that no module call took (a functional model's ``F.linear(h, params["layer1"]["weight"])``):
        the op that consumed each, read off the loss's graph, feeds the module owning a parameter it also takes."""
        held = {}  # (the node objects are held: a walk then meets these very objects)
        for entry in self.pending:
            fn = getattr(entry[1], "grad_fn", None)
            if fn is not None:
                held[id(fn)] = (fn, entry)
        root = loss.grad_fn
        if not held or root is None:
            return
        seen = {id(root)}
        queue = [root]
        while queue and held and len(seen) < MAX_GRAPH:
            node = queue.pop()
            for nxt, _ in getattr(node, "next_functions", ()):
                if nxt is None:
                    continue
                hit = held.get(id(nxt))
                if hit is not None and hit[0] is nxt:
                    module = _param_owner(node, nxt, owner)
                    if module is not None:
                        hit[1][0]["feeds"] = module
                        self.pending = [e for e in self.pending if e is not hit[1]]
                        del held[id(nxt)]
                if id(nxt) not in seen:
                    seen.add(id(nxt))
                    queue.append(nxt)

    def _passed_on(self, input: Any, out: Any) -> None:
        """A pending output goes through another wrapped call (a dropout after a sigmoid): follow it on."""
        self.pending = [(data, out if o is input else o) for data, o in self.pending]

    def take(self) -> tuple[list[tuple[str, int | None, dict[str, Any]]], list[tuple[int | None, torch.Tensor]]]:
        rows, maps, self.rows, self.maps = self.rows, self.maps, [], []
        self.pending = []
        self.armed = False
        return rows, maps

    def _once(self, kind: str, module: int | None) -> bool:
        key = (kind, module)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            with torch.no_grad():
                fn()
        except Exception:  # an observation must never break the user's call: stop observing
            self.failed, self.armed = True, False

    # -- wrappers ------------------------------------------------------------
    def _wrap_loss(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        obs = self

        @functools.wraps(original)
        def loss(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(input, target, *args, **kwargs)
            if not _compiling() and obs.armed and isinstance(input, torch.Tensor) and isinstance(target, torch.Tensor):
                module = obs._current()
                if obs._once(f"loss:{name}", module):
                    def note() -> None:
                        given = kwargs
                        if name == "ctc_loss" and len(args) >= 4 and "reduction" not in kwargs:  # (nn.CTCLoss passes it by position)
                            given = {**kwargs, "reduction": args[3]}
                        stats = loss_stats(name, input, target, given)
                        if isinstance(result, torch.Tensor) and result.numel() == 1:
                            stats["value"] = float(result.detach())  # (the loss function's own value, beside any penalty added)
                        elif isinstance(result, torch.Tensor) and result.numel() > 1 and result.is_floating_point():
                            # per-element terms (reduction='none'): their mean, and how many, tell a sum from a mean
                            stats["value_mean"] = float(result.detach().float().mean())
                            stats["terms"] = int(result.numel())
                        obs.rows.append(("loss", module, stats))

                    obs._guarded(note)
            return result

        return loss

    def _wrap_softmax(self, original: Callable[..., Any]) -> Callable[..., Any]:
        obs = self

        @functools.wraps(original)
        def softmax(x: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(x, *args, **kwargs)
            if not _compiling() and obs.armed and isinstance(out, torch.Tensor) and out.dim() >= 3 and out.is_floating_point():
                dim = kwargs.get("dim", args[0] if args else None)
                if dim in (-1, out.dim() - 1):
                    module = obs._current()
                    if obs._once("attention", module):
                        obs._guarded(lambda: obs._attention(module, out.detach()))
            return out

        return softmax

    def _wrap_sdpa(self, original: Callable[..., Any]) -> Callable[..., Any]:
        obs = self

        @functools.wraps(original)
        def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale: float | None = None, **kwargs: Any) -> Any:
            if not _compiling() and obs.armed and isinstance(query, torch.Tensor) and query.dim() >= 3:
                module = obs._current()
                if obs._once("attention", module):
                    obs._guarded(lambda: obs._attention(module, attention_probs(query, key, attn_mask, is_causal, scale)))
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kwargs)

        return sdpa

    def _wrap_dropout(self, original: Callable[..., Any]) -> Callable[..., Any]:
        obs = self

        @functools.wraps(original)
        def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
            if _compiling() or not obs.armed:
                return original(input, p, training, inplace)
            module = obs._current()
            out = original(input, p, training, inplace)
            obs._passed_on(input, out)
            if obs._once("dropout", module):
                data: dict[str, Any] = {"p": float(p), "training": bool(training)}
                obs.rows.append(("dropout", module, data))
                if not obs._in_dropout_module():
                    obs.pending.append((data, out))
            return out

        return dropout

    def _wrap_sigmoid(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A sigmoid called in a forward (not by an nn.Sigmoid): which module its output feeds, so that a sigmoid
        between two layers (a hidden activation, not a gate or an output) is known as one."""
        obs = self

        @functools.wraps(original)
        def sigmoid(input: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(input, *args, **kwargs)
            # (unmeasured steps: one attribute read; a measured step follows its first few sigmoids)
            if not obs.armed or obs.sigmoids >= MAX_PENDING or _compiling() or obs._type() == "Sigmoid" or not isinstance(out, torch.Tensor):
                return out
            obs.sigmoids += 1
            data: dict[str, Any] = {}
            obs.rows.append(("sigmoid", obs._current(), data))
            obs.pending.append((data, out))
            return out

        return sigmoid

    def _attention(self, module: int | None, probs: torch.Tensor) -> None:
        """Entropy (over log K, 0 = one key, 1 = uniform) and largest weight of each head, over a few batch rows."""
        p = probs[:ATTENTION_SAMPLES].float()
        if p.dim() == 3:  # [B, Q, K]: one head
            p = p.unsqueeze(1)
        k = p.shape[-1]
        if k < 2:
            return
        p = p.reshape(p.shape[0], -1, p.shape[-2], k)
        h = -(p * torch.log(p.clamp_min(1e-12))).sum(-1)  # [B, H, Q]
        ent = h / math.log(k)
        valid = (p > 1e-9).sum(-1).float()  # the keys a mask leaves each query
        within = torch.where(valid >= 2, h / torch.log(valid.clamp_min(2)), torch.zeros_like(h))  # over the keys it may see
        top = p.amax(-1).mean(dim=(0, 2))
        self.rows.append(("attention", module, {"keys": int(k), "queries": int(p.shape[-2]), "heads": int(p.shape[1]),
                                                "entropy": [round(float(v), 5) for v in ent.mean(dim=(0, 2)).tolist()],
                                                "entropy_valid": [round(float(v), 5) for v in within.mean(dim=(0, 2)).tolist()],
                                                "valid_keys": [round(float(v), 3) for v in valid.mean(dim=(0, 2)).tolist()],
                                                "maxprob": [round(float(v), 5) for v in top.tolist()],
                                                **key_modes(probs, self._model_args())}))
        if self.keep_maps and p.numel() * 4 <= ATTENTION_BYTES:
            self.maps.append((module, p.detach().cpu()))


def key_modes(probs: torch.Tensor, given: tuple[Any, ...]) -> dict[str, float]:
    """How much the keys attention may see, and the keys it may not, are one repeated item (the padding), when the
    model's input positions are the keys: token ids [B, K] or items [B, K, D] (a set's elements). An inverted padding
    mask leaves the padding and hides the varied tokens. ``probs``: [B', H, Q, K] for the first B' rows of the batch,
    or [B * H, Q, K] (nn.MultiheadAttention's weights, row b * H + h) or [B, Q, K]."""
    k = probs.shape[-1]
    x = next((a for a in given if isinstance(a, torch.Tensor) and a.dim() >= 2 and a.shape[1] == k
              and (a.dim() == 2 and not a.is_floating_point() or a.dim() == 3 and a.is_floating_point())), None)
    if x is None:
        return {}
    n = min(ATTENTION_SAMPLES, x.shape[0])
    if probs.dim() == 4 and probs.shape[0] <= x.shape[0]:
        n = min(n, probs.shape[0])
        p = probs[:n]
    elif probs.dim() == 3 and probs.shape[0] >= x.shape[0] and probs.shape[0] % x.shape[0] == 0:
        heads = probs.shape[0] // x.shape[0]
        p = probs[:n * heads].reshape(n, heads, probs.shape[1], k)
    else:
        return {}
    seen = (p > 1e-9).any(2).any(1)  # [n, K]: keys that some query of some head may attend to
    rows = x[:n].detach().to(seen.device)
    return modes(rows[seen], rows[~seen])


def modes(kept: torch.Tensor, hidden: torch.Tensor) -> dict[str, float]:
    """The share of the most common item (an id, or an item's row of features) among the positions a mask keeps and
    among those it hides (at least 8 of each): padding is one repeated item, text is not."""
    out: dict[str, float] = {}
    for name, part in (("kept_mode_share", kept), ("hidden_mode_share", hidden)):
        if part.shape[0] >= 8:
            _, counts = torch.unique(part.reshape(part.shape[0], -1), dim=0, return_counts=True)
            out[name] = round(float(counts.max()) / part.shape[0], 4)
    return out


def attention_probs(query: torch.Tensor, key: torch.Tensor, mask: Any, is_causal: bool, scale: float | None) -> torch.Tensor:
    """The attention weights scaled_dot_product_attention would use, for the first few batch rows."""
    q, k = query[:ATTENTION_SAMPLES].float(), key[:ATTENTION_SAMPLES].float()
    if q.dim() == 3:
        q, k = q.unsqueeze(1), k.unsqueeze(1)
    if k.shape[1] != q.shape[1] and q.shape[1] % k.shape[1] == 0:  # grouped-query attention
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * s
    if is_causal:
        n_q, n_k = scores.shape[-2], scores.shape[-1]
        scores = scores.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).triu(n_k - n_q + 1), float("-inf"))
    if isinstance(mask, torch.Tensor):
        keep = mask[:ATTENTION_SAMPLES] if mask.dim() >= 3 and mask.shape[0] > 1 else mask
        scores = scores.masked_fill(~keep, float("-inf")) if keep.dtype == torch.bool else scores + keep.float()
    return _SOFTMAX(scores, dim=-1).nan_to_num(0.0)


def mask_stats(mask: torch.Tensor, ids: torch.Tensor | None) -> dict[str, Any] | None:
    """What a model's ``attention_mask`` (1: attend, 0: hide; [B, T]) keeps: the share of sequences it hides entirely,
    and, given the token ids, how much the kept and the hidden tokens are one repeated id (padding is one id: a mask
    that keeps the padding and hides the text is inverted)."""
    if mask.dim() != 2 or mask.numel() == 0 or mask.is_floating_point() and not bool(((mask == 0) | (mask == 1)).all()):
        return None
    keep = mask.detach() != 0
    out: dict[str, Any] = {"arg": "attention_mask", "rows": int(keep.shape[0]), "empty_rows": float((~keep.any(-1)).float().mean()),
                           "kept": float(keep.float().mean())}
    if ids is not None and ids.shape == mask.shape and not ids.is_floating_point():
        out.update(modes(ids[keep], ids[~keep]))
    return out


def loss_stats(name: str, input: torch.Tensor, target: torch.Tensor, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a loss function was given: shapes, the range of its input and targets, and what they look like."""
    x = input.detach()
    t = target.detach()
    xf = x.float()
    out: dict[str, Any] = {"loss": name, "input_shape": list(x.shape), "target_shape": list(t.shape), "target_dtype": str(t.dtype).replace("torch.", ""),
                           "reduction": kwargs.get("reduction", "mean"), "input_min": float(xf.min()) if x.numel() else None,
                           "input_max": float(xf.max()) if x.numel() else None,
                           "input_zero_frac": float((xf == 0).float().mean()) if x.numel() else None}
    smoothing = kwargs.get("label_smoothing")
    if isinstance(smoothing, (int, float)) and smoothing:
        out["label_smoothing"] = float(smoothing)
    if x.dim() >= 2 and x.shape[-1] > 1 and x.numel():
        out["input_rowsum_dev"] = float((xf.sum(-1) - 1).abs().max())  # 0 when its rows are probabilities
        if name in ("cross_entropy", "nll_loss"):
            out["input_rowsum_dev"] = float((xf.sum(1) - 1).abs().max()) if x.dim() >= 2 else out["input_rowsum_dev"]
        if name in ("nll_loss", "ctc_loss"):  # log-probabilities: each row's exponentials sum to 1 (logsumexp 0) over the classes
            out["input_lse_dev"] = float(torch.logsumexp(xf, 1 if name == "nll_loss" else -1).abs().max())
    if t.numel():
        tf = t.float()
        out["target_min"], out["target_max"] = float(tf.min()), float(tf.max())
        out["target_integral"] = bool((tf == tf.round()).all())
        distinct = torch.unique(t.flatten()[:4096])
        out["target_distinct"] = int(min(len(distinct), MAX_DISTINCT + 1))
    return out


def _param_owner(consumer: Any, came_from: Any, owner: Callable[[torch.Tensor], int | None]) -> int | None:
    """The module owning a parameter that ``consumer`` takes beside ``came_from`` (directly, or through a transpose
    or a reshape of it), or None."""
    stack = [(n, 0) for n, _ in getattr(consumer, "next_functions", ()) if n is not None and n is not came_from]
    while stack:
        node, depth = stack.pop(0)
        variable = getattr(node, "variable", None)  # (AccumulateGrad: a leaf)
        if isinstance(variable, torch.Tensor):
            module = owner(variable)
            if module is not None:
                return module
        elif depth < 3 and type(node).__name__ in _PARAM_PATH:
            stack.extend((n, depth + 1) for n, _ in node.next_functions if n is not None)
    return None
