"""A simulated GPU exporter for the demo (each vendor's renders its body): a real HTTP server on loopback serving /metrics (tests add faults)."""

from __future__ import annotations

import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import Callable, Dict, Optional, Union

from exporter.demo.loopback_server import OpenConnections, QuietServer

Body = Union[bytes, Callable[[], bytes]]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# client_golang's promhttp, which AMD's metrics exporter serves with, writes each metric family through a
# bufio.Writer of 4 KiB (prometheus/common expfmt), and Go's server sends each write larger than its own 2 KiB
# buffer as a chunk (smaller ones are gathered up to 2 KiB). dcgm-exporter writes its whole answer at once:
# one chunk.
PROMHTTP_CHUNK_BYTES = 4096
_GO_GZIP_LEVEL = 6  # compress/flate's DefaultCompression, which promhttp's gzip.NewWriter uses (Python's is 9)


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
    as a vendor's real exporter does: keep-alive, 404 elsewhere (naming the exporter played, `name`).
    `body` is settable at any time.

    How a 200 answer travels, settable at any time too: with a Content-Length (the default), or `chunked`
    (Transfer-Encoding: chunked, as Go's server sends an answer it does not know the size of: dcgm-exporter's
    in one chunk), then in chunks of at most `chunk_bytes` (None: one chunk) and, where `gzip_when_asked`,
    gzip-compressed for a request that accepts gzip, at the level of Go's gzip.NewWriter (6). `promhttp=True`
    sets all three as AMD's exporter, served by client_golang's promhttp, answers: 4 KiB chunks, gzip when
    asked.

    The demo runs it as it is; tests/support adds faults by overriding `_answer`.
    """

    def __init__(self, body: Body, host: str = "127.0.0.1", port: int = 0, name: str = "the GPU exporter",
                 promhttp: bool = False) -> None:
        self.body = body
        self.name = name
        self.chunked = promhttp
        self.chunk_bytes: Optional[int] = PROMHTTP_CHUNK_BYTES if promhttp else None
        self.gzip_when_asked = promhttp
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
        self._send_ok(handler, self._render())

    def _render(self) -> bytes:
        body = self.body
        return body() if callable(body) else body

    def _send_ok(self, handler: _Handler, body: bytes) -> None:
        """A 200 answer with `body`, sized or chunked and compressed as set."""
        if not self.chunked:
            self._send(handler, 200, body)
            return
        headers: Dict[str, str] = {"Transfer-Encoding": "chunked"}
        if self.gzip_when_asked and "gzip" in handler.headers.get("Accept-Encoding", "").lower():
            body, headers["Content-Encoding"] = gzip.compress(body, compresslevel=_GO_GZIP_LEVEL), "gzip"
        send_head(handler, headers)
        handler.wfile.write(chunked_wire(body, self.chunk_bytes))
        handler.wfile.flush()

    @staticmethod
    def _send(handler: _Handler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()


def send_head(handler: BaseHTTPRequestHandler, headers: Dict[str, str]) -> None:
    """A 200 status line and headers: the text's content type, then these."""
    handler.send_response(200)
    handler.send_header("Content-Type", CONTENT_TYPE)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()


def chunked_wire(body: bytes, chunk_bytes: Optional[int] = None) -> bytes:
    """`body` with HTTP/1.1 chunked framing: chunks of at most `chunk_bytes` (None: one chunk), then the last."""
    step = chunk_bytes or len(body) or 1
    framed = []
    for start in range(0, len(body), step):
        piece = body[start : start + step]
        framed += [b"%x\r\n" % len(piece), piece, b"\r\n"]
    return b"".join(framed) + b"0\r\n\r\n"
