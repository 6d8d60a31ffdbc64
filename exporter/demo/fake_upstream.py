"""A simulated GPU exporter for the demo (each vendor's renders its body): a real HTTP server on loopback serving /metrics (tests add faults)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import Callable, Optional, Union

from exporter.demo.loopback_server import OpenConnections, QuietServer

Body = Union[bytes, Callable[[], bytes]]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Server(QuietServer):
    # socketserver's default backlog of 5 drops SYNs under a burst of scrapes, and each drop costs
    # the client a 1 s retransmit; Go servers (the vendors' exporters) listen with the system maximum.
    request_queue_size = 128

    def __init__(self, address, fake: "FakeUpstreamExporter") -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.fake = fake
        self.open_connections = OpenConnections()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    # Keep-alive, as Go's net/http does, so clients reuse connections as they would with the real one.
    protocol_version = "HTTP/1.1"
    # Go sets TCP_NODELAY on every connection; without it the body write can wait on a delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.open_connections.opened(self.connection)

    def finish(self) -> None:
        self.server.open_connections.closed(self.connection)
        super().finish()

    def do_GET(self) -> None:
        self.server.fake._answer(self)

    def log_message(self, format: str, *args) -> None:
        pass  # one stderr line per request would drown test and demo output


class FakeUpstreamExporter:
    """Serves `body` (bytes, or a zero-argument callable called per request) at http://HOST:PORT/metrics,
    as a vendor's real exporter does: keep-alive, Content-Length, 404 elsewhere (naming the exporter
    played, `name`). `body` is settable at any time.

    The demo runs it as it is; tests/support adds faults by overriding `_answer`.
    """

    def __init__(self, body: Body, host: str = "127.0.0.1", port: int = 0, name: str = "the GPU exporter") -> None:
        self.body = body
        self.name = name
        self._address = (host, port)
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        """Full URL of /metrics; stays valid after stop(), and a restart binds the same port."""
        if self._address[1] == 0:
            raise RuntimeError(f"{type(self).__name__}.url is known only after start()")
        host, port = self._address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/metrics"

    def start(self) -> "FakeUpstreamExporter":
        if self._server is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        self._server = _Server(self._address, self)
        # Remember the port that port 0 gave us, so stop() then start() comes back at the same URL.
        self._address = (self._address[0], self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-upstream-exporter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops answering: open connections close, new ones are refused."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.open_connections.shut_all()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "FakeUpstreamExporter":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _answer(self, handler: _Handler) -> None:
        if handler.path.split("?", 1)[0] != "/metrics":
            self._send(handler, 404, f"not found: {self.name} serves /metrics\n".encode())
            return
        self._send(handler, 200, self._render())

    def _render(self) -> bytes:
        body = self.body
        return body() if callable(body) else body

    @staticmethod
    def _send(handler: _Handler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
