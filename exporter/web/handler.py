"""The request handler: a request head's time and size limits, and the replies to what the App answers for each path."""

from __future__ import annotations

import io
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Optional

from exporter.base.logs import log
from exporter.web.negotiation import encode_for
from exporter.web.scrape import ScrapeBody
from exporter.web.service import PLAIN_TEXT
# Slow or idle clients must not hold a request thread for long (slowloris); Prometheus sends
# its whole request at once. An idle keep-alive connection is closed after REQUEST_TIMEOUT_SECONDS;
# once a request has begun, its line and headers must all arrive within REQUEST_HEAD_TIMEOUT_SECONDS
# and REQUEST_HEAD_MAX_BYTES (a socket timeout alone restarts with every byte received).
REQUEST_TIMEOUT_SECONDS = 30
REQUEST_HEAD_TIMEOUT_SECONDS = 10
REQUEST_HEAD_MAX_BYTES = 64 * 1024


class _RequestHeadTooLargeError(Exception):
    """A client sent more than REQUEST_HEAD_MAX_BYTES without finishing its request line and headers."""


class _RequestHeadReader(io.RawIOBase):
    """The connection's read side, bounding the time and bytes a client may take to send a request head.

    Each socket read may wait only for what is left of the head's deadline, so a client trickling a
    byte at a time is cut off when the deadline passes, not kept alive by every byte.
    """

    def __init__(self, connection: socket.socket):
        self._connection = connection
        self._raw = connection.makefile("rb", buffering=0)
        self._deadline: Optional[float] = None  # None: not reading a request head
        self._started = False
        self._budget = 0

    def expect_request(self) -> None:
        self._deadline = time.monotonic() + REQUEST_TIMEOUT_SECONDS  # idle wait for the first byte
        self._started = False
        self._budget = REQUEST_HEAD_MAX_BYTES

    def head_received(self) -> None:
        self._deadline = None
        self._connection.settimeout(REQUEST_TIMEOUT_SECONDS)  # for writing the answer

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._deadline is not None:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("the request head was not received in time")
            self._connection.settimeout(remaining)
        count = self._raw.readinto(buffer)
        if count and self._deadline is not None:
            if not self._started:
                self._started = True
                self._deadline = min(self._deadline, time.monotonic() + REQUEST_HEAD_TIMEOUT_SECONDS)
            self._budget -= count
            if self._budget < 0:
                raise _RequestHeadTooLargeError()
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


class RequestHandler(BaseHTTPRequestHandler):
    """Answers one connection's requests: GET and HEAD of the routes, 405 for other methods."""

    # The ExporterHTTPServer (exporter.web.server) serving this handler, which gives it .app and
    # .connections; not imported here, since the server module imports this one.
    server: Any
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection between scrapes
    server_version = "pod-gpu-metrics-exporter"
    timeout = REQUEST_TIMEOUT_SECONDS
    # Headers and body leave in separate writes; with Nagle's algorithm a small body then waits for
    # the client's delayed ACK (40 ms on Linux) before it is sent. Go's servers disable it too.
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        self.rfile.close()  # replaced by a reader that bounds how a request head arrives
        self._head_reader = _RequestHeadReader(self.connection)
        self.rfile = io.BufferedReader(self._head_reader)

    def handle_one_request(self):
        self.server.connections.idle()  # waiting for a request: the first to go if slots run out
        self._head_reader.expect_request()
        try:
            super().handle_one_request()
        except _RequestHeadTooLargeError:
            # http.server's own limits (64 KiB per line, 100 headers) still allow ~6 MiB per request.
            self.request_version = "HTTP/1.1"
            self.requestline = self.command = ""
            self.close_connection = True
            self.send_error(431, f"request head larger than {REQUEST_HEAD_MAX_BYTES} bytes")

    def do_GET(self):
        self._serve(send_body=True)

    def do_HEAD(self):
        self._serve(send_body=False)

    def _serve(self, send_body: bool):
        self._head_reader.head_received()
        self.server.connections.busy()
        path = self.path.split("?", 1)[0]
        if self.headers.get("Content-Length", "0") not in ("", "0") or self.headers.get("Transfer-Encoding"):
            return self._reply(400, b"request bodies are not accepted\n", PLAIN_TEXT, send_body, close=True)
        answer = self.server.app.answer(path, self.headers.get("Authorization"))
        self._reply(answer.status, answer.body, answer.content_type, send_body, extra_headers=dict(answer.headers))

    def _reply(self, status: int, body: "bytes | ScrapeBody", content_type: str, send_body: bool,
               close: bool = False, extra_headers: Optional[dict] = None):
        parts, encoding = encode_for(body, self.headers.get("Accept-Encoding", ""))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(sum(len(part) for part in parts)))
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Vary", "Accept-Encoding")
        for name, value in (getattr(self.server.app.web_config, "extra_headers", None) or {}).items():
            self.send_header(name, value)
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if send_body:
            for part in parts:  # written one after the other: a 2 MB answer is not joined first
                if part:
                    self.wfile.write(part)

    def _method_not_allowed(self):
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _method_not_allowed

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        log("debug", "request", client=self.client_address[0], line=format % args)
