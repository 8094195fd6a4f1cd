"""gradsight: debug PyTorch training from the editor.

The runtime API (``watch``, ``check``, ``log``) imports torch on first use;
importing this package does not, so the language server, analysis, store and
viz stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .runtime.api import Handle


def watch(model: Any, optimizer: Any = None, **kwargs: Any) -> Handle:
    """Watch ``model`` (and ``optimizer``) until ``handle.close()``; see :func:`gradsight.runtime.api.watch`."""
    from .runtime.api import watch as _watch

    return _watch(model, optimizer, **kwargs)


def check(condition: str) -> bool:
    """For a VS Code conditional breakpoint: True on the step where ``condition`` holds."""
    from .runtime.check import check as _check

    return _check(condition, depth=2)


def layer_watch(condition: str, scope: str | None = None) -> bool:
    """The condition of a breakpoint on a layer's line (set by the editor): never stops there.

    The watch itself reaches the runtime as ``--break`` at launch, or through the
    run store's watches table while the run goes on; this marker keeps it visible
    (and editable) as a breakpoint on the line that creates the layer."""
    return False


def log(loss: Any = None) -> None:
    """Tell the active session this step's loss (overrides the one found at ``backward``)."""
    from .runtime.api import log as _log

    _log(loss)


__all__ = ["__version__", "check", "layer_watch", "log", "watch"]
