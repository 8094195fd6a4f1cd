"""Pausing the training loop in the user's own frame under debugpy.

``debugpy.breakpoint()`` called from an installed package never stops with
justMyCode on; ``pydevd.settrace(stop_at_frame=<user frame>)`` does (see
shared/notes/python-stack.md). With no client attached we report instead.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType

import torch

_GRADSIGHT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_LIBRARY_DIRS = tuple(
    os.path.abspath(p) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
)


def debugger_attached() -> bool:
    debugpy = sys.modules.get("debugpy")
    if debugpy is None:
        return False
    try:
        return bool(debugpy.is_client_connected())
    except Exception:
        return False


def _is_internal(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith((_GRADSIGHT_DIR, _TORCH_DIR)) or filename.startswith("<")


def user_frame(start: FrameType | None = None) -> FrameType | None:
    """The innermost frame of the user's code (not torch, gradsight or installed libraries)."""
    frame: FrameType | None = start or sys._getframe(1)
    fallback = None
    while frame is not None:
        name = frame.f_code.co_filename
        if not _is_internal(name):
            if not os.path.abspath(name).startswith(_LIBRARY_DIRS):
                return frame
            fallback = fallback or frame
        frame = frame.f_back
    return fallback


def pause(frame: FrameType | None) -> bool:
    """Suspend the debugger in ``frame`` (it stops at that frame's next line). False when impossible."""
    if frame is None or not debugger_attached():
        return False
    try:
        import pydevd  # available once debugpy is active
    except ImportError:
        return False
    pydevd.settrace(
        suspend=True,
        trace_only_current_thread=True,
        patch_multiprocessing=False,
        stop_at_frame=frame,
        notify_stdin=False,
    )
    return True
