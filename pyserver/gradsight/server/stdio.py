"""LSP over stdio with a framing that survives a malformed header.

pygls reads a header line by line and trusts its ``Content-Length``: a header with a
value that is not a number leaves the body to be read as the next header line (which
swallows the next message's header with it, and so on), and a length too large waits
for bytes that never come while later messages are eaten as its body. Here the stream
is kept in a buffer and each message is taken from one ``Content-Length:`` header to
the next: a body ends at its declared length, unless another header starts before
that (then the length was wrong and the body ends there); a header whose length is
not a number takes the bytes up to the next header, if they are a JSON object;
bytes before a header are skipped. A literal CR LF cannot occur inside a JSON body
outside whitespace, and ``Content-Length: N`` followed by CR LF is never JSON, so a
header is never mistaken inside a well-formed body. What cannot be read is logged
and dropped; every later message is answered at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO

from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

log = logging.getLogger("gradsight.server.stdio")

HEADER = re.compile(rb"Content-Length:[ \t]*([^\r\n]*)\r\n", re.IGNORECASE)
MAX_BODY = 256 * 1024 * 1024  # a declared length beyond this is a bad header, not a message to wait for
MAX_HEADER_BLOCK = 8192  # bytes from a header to its blank line


def _is_json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, UnicodeDecodeError):
        return False


class Framer:
    """Bytes in, message bodies out; resynchronises on the next ``Content-Length:`` header after any damage."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.dropped = 0  # damaged messages and stray bytes skipped (for the log and the tests)

    def feed(self, data: bytes) -> None:
        self.buf += data

    def messages(self) -> Iterator[bytes]:
        while True:
            body = self._next()
            if body is None:
                return
            yield body

    def _skip(self, n: int, why: str) -> None:
        if n > 0:
            log.warning("LSP input: skipped %d bytes (%s): %r", n, why, bytes(self.buf[: min(n, 80)]))
            del self.buf[:n]
            self.dropped += 1

    def _next(self) -> bytes | None:
        while True:
            m = HEADER.search(self.buf)
            if m is None:
                keep = len(b"Content-Length:") + 24  # a header may be arriving in pieces
                if len(self.buf) > keep and b"\n" in self.buf:
                    self._skip(len(self.buf) - keep, "no header")
                return None
            if m.start() > 0:
                self._skip(m.start(), "before a header")
                continue
            end = self.buf.find(b"\r\n\r\n", 0)
            if end < 0:
                if len(self.buf) > MAX_HEADER_BLOCK:
                    self._skip(m.end(), "a header with no end")
                    continue
                return None
            start = end + 4
            value = m.group(1).strip()
            later = HEADER.search(self.buf, start)
            if value.isdigit() and int(value) <= MAX_BODY:
                n = int(value)
                if len(self.buf) >= start + n and (later is None or later.start() >= start + n):
                    body = bytes(self.buf[start: start + n])
                    if later is None or _is_json_object(body) or not _is_json_object(bytes(self.buf[start: later.start()])):
                        del self.buf[: start + n]
                        return body  # a wrong body is the protocol's to report
                    # too short a length: the message runs to the next header
                if later is None:
                    return None  # the rest of the body is on its way
            elif later is None:
                # a length that is not a number: the body is what follows, once it is a whole JSON object
                if _is_json_object(bytes(self.buf[start:])):
                    body = bytes(self.buf[start:])
                    self.buf.clear()
                    log.warning("LSP input: a header with a bad Content-Length (%r); read the body that followed", value)
                    return body
                if len(self.buf) - start > MAX_BODY:
                    self._skip(len(self.buf), "a bad Content-Length and no next header")
                return None
            # the declared length is wrong (or not a number): this message ends where the next header starts
            assert later is not None
            body = bytes(self.buf[start: later.start()])
            if _is_json_object(body):
                log.warning("LSP input: Content-Length %r did not match its body (%d bytes); read it up to the next header", value, len(body))
                del self.buf[: later.start()]
                return body
            self._skip(later.start(), f"a message with Content-Length {value!r} that is not JSON")


async def _run(server: LanguageServer, stop: threading.Event, stdin: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    framer = Framer()
    read = getattr(stdin, "read1", None) or stdin.read
    while not stop.is_set():
        chunk = await loop.run_in_executor(server.thread_pool, read, 65536)
        if not chunk:
            break
        framer.feed(chunk)
        for body in framer.messages():
            try:
                message = json.loads(body, object_hook=server.protocol.structure_message)
                server.protocol.handle_message(message)
            except Exception as exc:
                log.exception("Unable to handle message")
                server.report_server_error(exc, JsonRpcException)


def start_io(server: LanguageServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """What ``server.start_io()`` does, with :class:`Framer` as the reader."""
    stop = threading.Event()
    server._stop_event = stop
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    try:
        asyncio.run(_run(server, stop, stdin or sys.stdin.buffer))
    except BrokenPipeError:
        log.error("Connection to the client is lost! Shutting down the server.")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


__all__ = ["Framer", "start_io"]

