"""Connections to a vendor's exporter: the headers every fetch sends, one connection per fetch, deadline-bound reads."""

from __future__ import annotations

import base64
import http.client
import io
import socket
import ssl
import time
from typing import Optional, Tuple

from exporter import __version__
from exporter.sources.upstream import Endpoint

# Sent with every fetch.
_HEADERS = {
    # We parse only the 0.0.4 text format; client_golang's promhttp serves it for text/plain.
    "Accept": "text/plain",
    # Uncompressed: the exporter asked runs on the same node, where the bytes cost little and the
    # compression is what costs. client_golang's promhttp (AMD's exporter) compresses whenever the client
    # accepts gzip: a 2.9 MB answer at gzip's default level is about 16 ms of CPU (zlib, timed here) for
    # it and 1.5 ms of inflating for us, every scrape. A gzip answer sent anyway is still decoded (http_body).
    "Accept-Encoding": "identity",
    # One answer per connection (exporter.sources.upstream.http_source): the server need not keep it open.
    "Connection": "close",
    "User-Agent": f"pod-gpu-metrics-exporter/{__version__}",
}


class _DeadlineReader(io.RawIOBase):
    """A response's read side where every socket read waits only for what is left of the fetch's
    deadline: a server trickling its status line, headers or body cannot stretch a fetch."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        # Read through a socket file, as http.client does: it keeps the socket open while the
        # response is read even after the connection lets go of it (a "Connection: close" answer).
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("the fetch's deadline passed")
        self._sock.settimeout(remaining)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class DeadlineResponse(http.client.HTTPResponse):
    """An HTTP response read through a _DeadlineReader."""

    def __init__(self, sock: socket.socket, *args, deadline: float, **kwargs) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the plain socket file the base class opened; ours replaces it
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


class Target:
    """Where and how to ask: the URL's host, port and path, the headers, and a connection factory."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.host, self.port, self.path = endpoint.host, endpoint.port, endpoint.path
        self.headers = _headers(endpoint.credentials)
        # One TLS context for all connections: building one loads the system's CA certificates.
        self._tls = ssl.create_default_context() if endpoint.scheme == "https" else None

    def connect(self) -> http.client.HTTPConnection:
        """A new, not yet connected, connection; http.client connects on its request."""
        if self._tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, context=self._tls)
        return http.client.HTTPConnection(self.host, self.port)


def _headers(credentials: Optional[Tuple[str, str]]) -> dict:
    """What every fetch sends; with credentials for an exporter behind basic auth (http://user:pass@host/…)."""
    headers = dict(_HEADERS)
    if credentials is not None:
        user, password = credentials
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return headers
