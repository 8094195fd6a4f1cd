"""Parameters a model holds where PyTorch does not look: modules or ``nn.Parameter`` s kept in a plain Python list,
tuple or dict attribute (``self.blocks = [Block() for _ in range(4)]`` instead of an ``nn.ModuleList``).

They run in the forward and receive gradients, but they are not in ``model.parameters()``: an optimizer built from
it never steps them, and ``state_dict`` and ``.to()`` miss them. Found once per model from its attributes (no per-call
cost); the session reports them when their parameters get gradients that no optimizer holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

_MODULE_OWN = frozenset(vars(nn.Module()))  # (nn.Module's own attributes: its registries and hooks)
MAX_ITEMS = 1024  # a container longer than this is data, not layers


@dataclass(frozen=True)
class Unregistered:
    """One plain container attribute holding parameters outside the model's registry."""

    path: str  # "blocks", "encoder.heads"
    container: str  # "list", "tuple", "dict"
    owner: str  # the class of the module whose attribute it is ("Encoder"): where a fix finds the assignment
    modules: int  # modules in it
    params: tuple[nn.Parameter, ...]


def find_unregistered(root: nn.Module) -> list[Unregistered]:
    registered = {id(p) for p in root.parameters()}
    out: list[Unregistered] = []
    for name, mod in root.named_modules():
        for attr, value in vars(mod).items():
            if attr in _MODULE_OWN or not isinstance(value, (list, tuple, dict)):
                continue
            items = list(value.values()) if isinstance(value, dict) else list(value)
            if len(items) > MAX_ITEMS:
                continue
            params: list[nn.Parameter] = []
            modules = 0
            for item in items:
                if isinstance(item, nn.Parameter):
                    params.append(item)
                elif isinstance(item, nn.Module):
                    modules += 1
                    params.extend(item.parameters())
            own = {id(p): p for p in params if id(p) not in registered}  # (a module listed twice counts once)
            if own:
                kind = "dict" if isinstance(value, dict) else type(value).__name__
                out.append(Unregistered(f"{name}.{attr}" if name else attr, kind, type(mod).__name__, modules, tuple(own.values())))
    return out


def advice(u: Unregistered) -> str:
    return {"dict": "nn.ModuleDict" if u.modules else "nn.ParameterDict"}.get(
        u.container, "nn.ModuleList" if u.modules else "nn.ParameterList")
