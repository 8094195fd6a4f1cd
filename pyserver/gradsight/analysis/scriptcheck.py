"""What the run's own script shows, read from its source (``gradsight.pairing``): code that takes the labels apart
from their inputs. A pattern of the code is evidence a loss curve cannot give: labels with no signal train like a
hard task, the loss falls some (the net memorises) and every gradient looks healthy.

The script is read at the path the run recorded, and only while it is the script that ran: one gone, or saved
after the run started (a fix applied since, say), shows nothing of that run, so its diagnosis rests on what was
recorded alone and an old run's root cause does not move when its script is edited.
"""

from __future__ import annotations

import math
import os

from .. import kinds
from ..pairing import repairs
from ..script import Script
from .data import RunData
from .findings import Finding

# below this share of its start fallen, a run whose script breaks the pairing has not learned its labels
LEARNED = 0.9


def detect(data: RunData, progress: float) -> list[Finding]:
    path = data.run.get("script")
    if not isinstance(path, str) or not path.endswith(".py") or not os.path.isfile(path):
        return []
    started = data.run.get("started")
    try:
        if isinstance(started, (int, float)) and os.path.getmtime(path) > started:
            return []  # changed since it ran: not the code that made this run
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
    except (OSError, UnicodeDecodeError):
        return []
    found = repairs(Script(source, path))
    if not found:
        return []
    where = "; ".join(f"line {r.stmt.lineno}: {r.note}" for r in found[:3])
    fell = max(0.0, progress) if math.isfinite(progress) else 0.0
    return [Finding(kinds.INPUT, kinds.LOSS_NOT_DECREASING, "warning" if fell >= LEARNED else "error",
                    f"the script takes its labels apart from their inputs ({where}), and the loss fell {fell:.0%}: the "
                    "labels carry no signal", 0.85, None,
                    mechanism=True)]
