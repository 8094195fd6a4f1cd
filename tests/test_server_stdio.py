"""The language server's stdio framing: a malformed header costs at most the message it belongs to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from gradsight.server.stdio import Framer

from .conftest import ROOT


def frame(body: dict[str, Any] | bytes, length: int | str | None = None) -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return f"Content-Length: {len(raw) if length is None else length}\r\n\r\n".encode() + raw


def request(i: int, method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def bodies(*chunks: bytes) -> list[Any]:
    f = Framer()
    out = []
    for c in chunks:
        f.feed(c)
        out += [json.loads(b) if b.startswith(b"{") else b for b in f.messages()]
    return out


def test_framer_reads_good_messages_split_anywhere():
    stream = frame(request(1, "a")) + frame(request(2, "b", {"text": "Content-Length: 3\n"}))
    for cut in range(1, len(stream)):
        got = bodies(stream[:cut], stream[cut:])
        assert [m["id"] for m in got] == [1, 2], cut


def test_framer_resynchronises_after_bad_headers():
    ok = request(9, "after")
    # a length that is not a number: the body that follows is still read
    assert [m["id"] for m in bodies(frame(request(1, "x"), "abc"), frame(ok))] == [1, 9]
    # a length far too large: the message ends where the next header starts
    assert [m["id"] for m in bodies(frame(request(2, "x"), 99999), frame(ok))] == [2, 9]
    # ... also when the next message arrives later
    assert [m["id"] for m in bodies(frame(request(2, "x"), 99999), frame(ok))] == [2, 9]
    # too short: the message is cut, the next one is read
    got = bodies(frame(request(3, "x"), 5) + frame(ok))
    assert [m["id"] for m in got if isinstance(m, dict)] == [3, 9] or [m["id"] for m in got if isinstance(m, dict)] == [9]
    # garbage between messages, a header with no body, a negative length
    got = bodies(b"hello\r\n" + frame(request(4, "x")) + b"Content-Length: -3\r\n\r\n" + frame(ok))
    assert [m["id"] for m in got if isinstance(m, dict)] == [4, 9]


class RawClient:
    """``gradsight serve`` over pipes, with a reader thread that collects every message it writes."""

    def __init__(self, cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "pyserver")}
        self.proc = subprocess.Popen([sys.executable, "-m", "gradsight", "serve"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.got: dict[int, dict[str, Any]] = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            header = out.readline()
            if not header:
                return
            if header.lower().startswith(b"content-length:"):
                n = int(header.split(b":")[1])
                while out.readline().strip():  # the other headers, to the blank line
                    pass
                msg = json.loads(out.read(n))
                with self.cond:
                    if "id" in msg and "method" not in msg:
                        self.got[msg["id"]] = msg
                    self.cond.notify_all()

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def answer(self, i: int, timeout: float = 20.0) -> dict[str, Any] | None:
        with self.cond:
            self.cond.wait_for(lambda: i in self.got, timeout=timeout)
            return self.got.get(i)

    def close(self) -> str:
        try:
            self.send(frame(request(999, "shutdown")))
            self.answer(999, timeout=10)
            self.send(frame({"jsonrpc": "2.0", "method": "exit"}))
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        return (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace")


def test_server_answers_after_malformed_headers(tmp_path: Path):
    client = RawClient(tmp_path)
    try:
        client.send(frame(request(1, "initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})))
        init = client.answer(1)
        assert init is not None and "capabilities" in init["result"]
        client.send(frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        state = request(2, "workspace/executeCommand", {"command": "gradsight.state", "arguments": []})
        client.send(frame(state, "not-a-number"))  # a bad Content-Length: the body is still read and answered
        assert client.answer(2) is not None
        client.send(frame(request(3, "workspace/executeCommand", {"command": "gradsight.state", "arguments": []}), 10**6))
        # far too long: pygls would eat every later message as this body; the next request is answered
        client.send(frame(request(4, "workspace/executeCommand", {"command": "gradsight.listRuns", "arguments": []})))
        four = client.answer(4)
        assert four is not None and four["result"]["runs"] == []
        assert client.answer(3, timeout=1) is not None  # read up to the next header, and answered too
        client.send(b"garbage without a header\r\n\r\n")
        client.send(frame(request(5, "workspace/executeCommand", {"command": "gradsight.state", "arguments": []})))
        assert client.answer(5) is not None
    finally:
        stderr = client.close()
    assert "Traceback" not in stderr, stderr[-2000:]
    assert client.proc.returncode == 0
