"""The demo's HTTP dcgm-exporter with what tests and benchmarks add: faults, error statuses, render time, counts."""

from __future__ import annotations

import os
import threading
from typing import Optional

from exporter.demo.fake_upstream import Body, FakeUpstreamExporter, send_head

FAULTS = (None, "hang", "empty", "garbage", "truncate", "unsized")
# A hanging answer gives up on its own after this long, so a forgotten fault cannot pin a thread.
_HANG_SECONDS = 60.0
_GARBAGE_BYTES = 4096


class FakeDcgmExporter(FakeUpstreamExporter):
    """The demo's dcgm-exporter, still a real HTTP server on loopback, told to misbehave.

    Settable at any time: `body`, `status` (a non-200 status answers with a short text body),
    `fault`: None, "hang" (no answer until stop() or 60 s), "empty" (200, empty body), "garbage"
    (200, random bytes), "truncate" (half the body, then the connection closes although
    Content-Length promised all of it), "unsized" (the body without Content-Length, ended by closing
    the connection, so a client learns its size only by reading it). `hang` wins over `status`,
    `status` over the others.

    Also settable: `chunked`, `chunk_bytes` and `gzip_when_asked` (how a 200 answer travels, as in the demo's;
    the real dcgm-exporter's Go server sends a large answer written in one piece `chunked`, in one chunk;
    `promhttp=True` answers as AMD's exporter does) and
    `render_seconds` (how long each answer takes to render before its first byte; the real one gathers and
    formats every sample on every request). `requests` counts what arrived.
    """

    def __init__(self, body: Body, host: str = "127.0.0.1", port: int = 0, promhttp: bool = False) -> None:
        super().__init__(body, host, port, name="dcgm-exporter", promhttp=promhttp)
        self.status = 200
        self.render_seconds = 0.0
        self._fault: Optional[str] = None
        self._requests = 0
        self._lock = threading.Lock()
        self._released = threading.Event()  # set by stop(): hanging and rendering answers end

    @property
    def fault(self) -> Optional[str]:
        return self._fault

    @fault.setter
    def fault(self, value: Optional[str]) -> None:
        if value not in FAULTS:
            raise ValueError(f"unknown fault {value!r}; expected one of {FAULTS}")
        self._fault = value

    @property
    def requests(self) -> int:
        """Requests received so far, answered or not."""
        with self._lock:
            return self._requests

    def start(self) -> "FakeDcgmExporter":
        self._released.clear()
        super().start()
        return self

    def stop(self) -> None:
        """Stops answering: hanging answers end, open connections close, new ones are refused."""
        self._released.set()
        super().stop()

    def _answer(self, handler) -> None:
        with self._lock:
            self._requests += 1
        fault, status = self._fault, self.status
        if handler.path.split("?", 1)[0] != "/metrics":
            super()._answer(handler)  # the 404, faults or not
        elif fault == "hang":
            self._released.wait(_HANG_SECONDS)
            handler.close_connection = True
        elif status != 200:
            self._send(handler, status, b"simulated dcgm-exporter failure\n")
        elif fault == "empty":
            self._send(handler, 200, b"")
        elif fault == "garbage":
            self._send(handler, 200, os.urandom(_GARBAGE_BYTES))
        elif fault == "unsized":
            _send_unsized(handler, self._render())
            handler.close_connection = True
        elif fault == "truncate":
            _send_truncated(handler, self._render())
            handler.close_connection = True
        else:
            super()._answer(handler)

    def _render(self) -> bytes:
        if self.render_seconds:
            self._released.wait(self.render_seconds)
        return super()._render()


def _send_unsized(handler, body: bytes) -> None:
    send_head(handler, {"Connection": "close"})  # HTTP/1.1: the close marks the end of the body
    handler.wfile.write(body)
    handler.wfile.flush()


def _send_truncated(handler, body: bytes) -> None:
    send_head(handler, {"Content-Length": str(len(body))})
    handler.wfile.write(body[: len(body) // 2])
    handler.wfile.flush()
