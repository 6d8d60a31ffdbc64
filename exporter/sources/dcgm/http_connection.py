"""Connections to dcgm-exporter: --dcgm.url parsed, kept-alive connections lent per fetch, deadline-bound reads."""

from __future__ import annotations

import base64
import http.client
import io
import queue
import select
import socket
import ssl
import time
from typing import Callable, Optional
from urllib.parse import unquote, urlsplit

from exporter import __version__
from exporter.base.errors import ConfigError
from exporter.sources.dcgm import redact_url

# Sent with every fetch.
_HEADERS = {
    # We parse only the 0.0.4 text format; client_golang's promhttp serves it for text/plain.
    "Accept": "text/plain",
    # promhttp only compresses with gzip; we decode it ourselves to bound the decoded size.
    "Accept-Encoding": "gzip",
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
        self.poll_only = False  # read only what has already arrived (None when nothing has)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.poll_only:
            self._sock.settimeout(0.0)
            return self._raw.readinto(buffer)
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("the fetch's deadline passed")
        self._sock.settimeout(remaining)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class DeadlineResponse(http.client.HTTPResponse):
    """An HTTP response read through a _DeadlineReader, which notes bytes that came after its end."""

    def __init__(self, sock: socket.socket, *args, deadline: float, **kwargs) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()  # the plain socket file the base class opened; ours replaces it
        self._reader = _DeadlineReader(sock, deadline)
        self.fp = io.BufferedReader(self._reader)
        self.unread_bytes = False  # bytes came after the answer's end: the connection is out of step

    def _close_conn(self):
        # Called once the answer is read to its end. Anything already received beyond it (a second
        # answer nobody asked for) would be taken for the next fetch's answer: note it, so the
        # connection is discarded rather than reused.
        if self.fp is not None and not self.fp.closed:
            self._reader.poll_only = True
            try:
                self.unread_bytes = bool(self.fp.peek(1))
            except OSError:
                self.unread_bytes = True
        super()._close_conn()


class ConnectionPool:
    """Lends each fetch a kept-alive HTTP connection of its own for the length of that fetch.

    The HTTP server answers every scrape on a thread of its own, so connections are lent out of a
    LIFO queue rather than kept per thread; keep-alive still spares a TCP handshake per scrape.
    """

    def __init__(self, connect: Callable[[], http.client.HTTPConnection], idle_max: int) -> None:
        self._connect = connect
        self._idle: queue.LifoQueue = queue.LifoQueue(maxsize=idle_max)

    def acquire(self) -> http.client.HTTPConnection:
        while True:
            try:
                connection = self._idle.get_nowait()
            except queue.Empty:
                return self._connect()
            if not closed_by_peer(connection):
                return connection
            connection.close()

    def release(self, connection: http.client.HTTPConnection) -> None:
        try:
            self._idle.put_nowait(connection)
        except queue.Full:
            connection.close()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the server (Go closes idle ones after its
    IdleTimeout): readable with nothing asked means EOF or stray bytes, and either way it is spent."""
    sock = connection.sock
    if sock is None:
        return False  # not connected: http.client connects on the next request
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Target:
    """Where and how to ask: host, port, path and headers of --dcgm.url, and a connection factory."""

    def __init__(self, scheme: str, host: str, port: Optional[int], path: str, headers: dict) -> None:
        self.host, self.port, self.path, self.headers = host, port, path, headers
        # One TLS context for all connections: building one loads the system's CA certificates.
        self._tls = ssl.create_default_context() if scheme == "https" else None

    @classmethod
    def parse(cls, url: str) -> "Target":
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"--dcgm.url {redact_url(url)!r} has an invalid port: {exc}") from exc
        if not parts.hostname:
            raise ConfigError(f"--dcgm.url {redact_url(url)!r} names no host")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = dict(_HEADERS)
        if parts.username is not None:  # dcgm-exporter behind basic auth: http://user:pass@host/…
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode("ascii")
        return cls(parts.scheme.lower(), parts.hostname, port, path, headers)

    def connect(self) -> http.client.HTTPConnection:
        """A new, not yet connected, connection; http.client connects on its first request."""
        if self._tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, context=self._tls)
        return http.client.HTTPConnection(self.host, self.port)
