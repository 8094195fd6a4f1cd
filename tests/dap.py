"""A minimal Debug Adapter Protocol client (Content-Length framing over a socket), for tests."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DapClient:
    def __init__(self, port: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.sock.settimeout(None)
        self._seq = 0
        self._responses: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._cond = threading.Condition()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\r\n\r\n" in buf:
                head, rest = buf.split(b"\r\n\r\n", 1)
                length = int(next(h for h in head.decode().split("\r\n") if h.lower().startswith("content-length")).split(":")[1])
                if len(rest) < length:
                    break
                msg = json.loads(rest[:length])
                buf = rest[length:]
                if msg.get("type") == "response":
                    with self._cond:
                        self._responses[msg["request_seq"]] = msg
                        self._cond.notify_all()
                elif msg.get("type") == "event":
                    if msg["event"] == "output":
                        self.output.append(msg["body"].get("output", ""))
                    self._events.put(msg)

    def send(self, command: str, arguments: dict[str, Any] | None = None) -> int:
        self._seq += 1
        body = json.dumps({"seq": self._seq, "type": "request", "command": command, "arguments": arguments or {}}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self._seq

    def response(self, seq: int, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while seq not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no response to request {seq}")
                self._cond.wait(left)
            msg = self._responses.pop(seq)
        if not msg.get("success"):
            raise RuntimeError(f"{msg.get('command')} failed: {msg.get('message')}")
        return msg

    def request(self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        return self.response(self.send(command, arguments), timeout)

    def event(self, name: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {name!r} event")
            try:
                msg = self._events.get(timeout=left)
            except queue.Empty:
                raise TimeoutError(f"no {name!r} event") from None
            if msg["event"] == name:
                return msg
            if msg["event"] in ("terminated", "exited") and name == "stopped":
                raise AssertionError(f"the debuggee ended before stopping: {''.join(self.output)[-2000:]}")

    def attach(self, breakpoints: dict[str, list[dict[str, Any]]] | None = None, just_my_code: bool = True) -> None:
        self.request("initialize", {"clientID": "gradsight-tests", "adapterID": "debugpy", "pathFormat": "path",
                                    "linesStartAt1": True, "columnsStartAt1": True, "supportsVariableType": True})
        attach_seq = self.send("attach", {"justMyCode": just_my_code, "redirectOutput": True})
        self.event("initialized", timeout=60)
        for path, bps in (breakpoints or {}).items():
            self.request("setBreakpoints", {"source": {"path": path}, "breakpoints": bps})
        self.request("configurationDone")
        self.response(attach_seq)

    def top_frame(self, thread_id: int) -> dict[str, Any]:
        frames = self.request("stackTrace", {"threadId": thread_id, "startFrame": 0, "levels": 20})["body"]["stackFrames"]
        return frames[0]

    def locals(self, frame_id: int) -> dict[str, str]:
        scopes = self.request("scopes", {"frameId": frame_id})["body"]["scopes"]
        ref = next(s["variablesReference"] for s in scopes if s["name"].lower().startswith("locals"))
        variables = self.request("variables", {"variablesReference": ref})["body"]["variables"]
        return {v["name"]: v["value"] for v in variables}

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
