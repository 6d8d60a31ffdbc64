"""A simulated dcgm-exporter: a real HTTP server on loopback serving /metrics, with faults to inject."""

from __future__ import annotations

import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional, Set, Union

Body = Union[bytes, Callable[[], bytes]]
FAULTS = (None, "hang", "empty", "garbage", "truncate", "unsized")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A hanging answer gives up on its own after this long, so a forgotten fault cannot pin a thread.
_HANG_SECONDS = 60.0
_GARBAGE_BYTES = 4096


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops SYNs under a burst of scrapes, and each drop costs
    # the client a 1 s retransmit; Go servers (dcgm-exporter) listen with the system maximum.
    request_queue_size = 128

    def __init__(self, address, fake: "FakeDcgmExporter") -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.fake = fake
        self.open_connections: Set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request, client_address) -> None:
        # Clients that time out and hang up are the point of several faults, not news.
        if not isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # Keep-alive, as Go's net/http does, so clients reuse connections as they would with the real one.
    protocol_version = "HTTP/1.1"
    # Go sets TCP_NODELAY on every connection; without it the body write can wait on a delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.open_connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.open_connections.discard(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self.server.fake._answer(self)

    def log_message(self, format: str, *args) -> None:
        pass  # one stderr line per request would drown test and demo output


class FakeDcgmExporter:
    """Serves `body` (bytes, or a zero-argument callable called per request) at http://HOST:PORT/metrics.

    Settable at any time: `body`, `status` (a non-200 status answers with a short text body),
    `fault`: None, "hang" (no answer until stop() or 60 s), "empty" (200, empty body), "garbage"
    (200, random bytes), "truncate" (half the body, then the connection closes although
    Content-Length promised all of it), "unsized" (the body without Content-Length, ended by closing
    the connection, so a client learns its size only by reading it). `hang` wins over `status`,
    `status` over the others.

    Also settable: `chunked` (answer with Transfer-Encoding: chunked and no Content-Length, as the real
    dcgm-exporter's Go server does for a large answer written in one piece: one chunk, then the last,
    empty one) and `render_seconds` (how long each answer takes to render before its first byte; the
    real one gathers and formats every sample on every request).
    """

    def __init__(self, body: Body, host: str = "127.0.0.1", port: int = 0) -> None:
        self.body = body
        self.status = 200
        self.chunked = False
        self.render_seconds = 0.0
        self._fault: Optional[str] = None
        self._address = (host, port)
        self._requests = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

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

    @property
    def url(self) -> str:
        """Full URL of /metrics; stays valid after stop(), and a restart binds the same port."""
        if self._address[1] == 0:
            raise RuntimeError("FakeDcgmExporter.url is known only after start()")
        host, port = self._address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/metrics"

    def start(self) -> "FakeDcgmExporter":
        if self._server is not None:
            raise RuntimeError("FakeDcgmExporter is already started")
        self._stopped.clear()
        self._server = _Server(self._address, self)
        # Remember the port that port 0 gave us, so stop() then start() comes back at the same URL.
        self._address = (self._address[0], self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-dcgm-exporter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops answering: hanging answers end, open connections close, new ones are refused."""
        self._stopped.set()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with server.connections_lock:
            connections = list(server.open_connections)
        for connection in connections:
            # shutdown() (not close()) wakes a handler thread blocked reading a keep-alive socket.
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "FakeDcgmExporter":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _answer(self, handler: _Handler) -> None:
        with self._lock:
            self._requests += 1
        if handler.path.split("?", 1)[0] != "/metrics":
            self._send(handler, 404, b"not found: dcgm-exporter serves /metrics\n")
            return
        fault, status = self._fault, self.status
        if fault == "hang":
            self._stopped.wait(_HANG_SECONDS)
            handler.close_connection = True
            return
        if status != 200:
            self._send(handler, status, b"simulated dcgm-exporter failure\n")
        elif fault == "empty":
            self._send(handler, 200, b"")
        elif fault == "garbage":
            self._send(handler, 200, os.urandom(_GARBAGE_BYTES))
        elif fault == "unsized":
            self._send(handler, 200, self._render(), sized=False)
            handler.close_connection = True
        elif fault == "truncate":
            body = self._render()
            self._send(handler, 200, body, send_bytes=len(body) // 2)
            handler.close_connection = True
        elif self.chunked:
            self._send_chunked(handler, self._render())
        else:
            self._send(handler, 200, self._render())

    def _render(self) -> bytes:
        if self.render_seconds:
            self._stopped.wait(self.render_seconds)
        body = self.body
        return body() if callable(body) else body

    @staticmethod
    def _send_chunked(handler: _Handler, body: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", CONTENT_TYPE)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        if body:
            handler.wfile.write(b"%x\r\n" % len(body))
            handler.wfile.write(body)
            handler.wfile.write(b"\r\n")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    @staticmethod
    def _send(handler: _Handler, status: int, body: bytes, send_bytes: Optional[int] = None,
              sized: bool = True) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
        if sized:
            handler.send_header("Content-Length", str(len(body)))
        else:
            handler.send_header("Connection", "close")  # HTTP/1.1: the close marks the end of the body
        handler.end_headers()
        handler.wfile.write(body if send_bytes is None else body[:send_bytes])
        handler.wfile.flush()
