"""The language server (``gradsight serve``): pygls over stdio. Never imports torch."""

from __future__ import annotations

import logging
import sys


def serve(store: str | None = None, runs_folder: str | None = None, log_file: str | None = None) -> None:
    fmt = "%(asctime)s %(name)s %(levelname)s %(message)s"
    if log_file:
        logging.basicConfig(filename=log_file, level=logging.INFO, format=fmt)
    else:  # stdout carries the protocol: the log goes to stderr
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=fmt)
    from .lsp import server
    from .stdio import start_io

    if store:
        server.options.store = store
    if runs_folder:
        server.options.runs_folder = runs_folder
    start_io(server)  # pygls's own reader, with a framing that survives a malformed header (stdio.py)
