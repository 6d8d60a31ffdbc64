"""Fetching dcgm-exporter's Prometheus text over HTTP: one deadline per fetch, a size cap, kept-alive connections."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.client
import io
import queue
import select
import socket
import ssl
import time
import zlib
from typing import Callable, List, Optional
from urllib.parse import unquote, urlsplit

from exporter import __version__
from exporter.base.errors import ConfigError, UpstreamError
from exporter.sources.dcgm import DEFAULT_MAX_BODY_BYTES, redact_url

DEFAULT_MAX_BYTES = DEFAULT_MAX_BODY_BYTES  # --dcgm.max-body-size
_READ_CHUNK_BYTES = 64 * 1024
# Idle connections kept for reuse. Scrapes beyond this many at once still work: they get a fresh
# connection, which is closed afterwards instead of being kept.
_IDLE_CONNECTIONS = 4
_HEADERS = {
    # We parse only the 0.0.4 text format; client_golang's promhttp serves it for text/plain.
    "Accept": "text/plain",
    # promhttp only compresses with gzip; we decode it ourselves to bound the decoded size.
    "Accept-Encoding": "gzip",
    "User-Agent": f"pod-gpu-metrics-exporter/{__version__}",
}
_GZIP_ENCODINGS = ("gzip", "x-gzip")
_IDENTITY_ENCODINGS = ("", "identity")


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


class _DeadlineResponse(http.client.HTTPResponse):
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


class _ConnectionPool:
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
            if not _closed_by_peer(connection):
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


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
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


class _Body:
    """Collects a response body, decoding gzip on the fly and never growing past max_bytes decoded.

    Decoding here rather than in urllib3 lets us cap each inflate step (`max_length`), so a small
    gzip bomb cannot allocate more than the cap before we notice.
    """

    def __init__(self, max_bytes: int, gzipped: bool, error: Callable[[str, str], UpstreamError]) -> None:
        self._max_bytes = max_bytes
        self._error = error
        self._parts: List[bytes] = []
        self._size = 0
        self._inflater = _gunzipper() if gzipped else None
        self._member_open = False  # a gzip member has begun but not yet ended
        self.wire_bytes = 0

    def feed(self, data: bytes) -> None:
        self.wire_bytes += len(data)
        if self._inflater is None:
            self._keep(data)
            return
        try:
            self._inflate(data)
        except zlib.error as exc:
            raise self._error(f"sent a gzip body that does not decode ({exc})", "error") from exc

    def _inflate(self, data: bytes) -> None:
        while data:
            self._member_open = True
            self._keep(self._inflater.decompress(data, self._max_bytes - self._size + 1))
            if self._inflater.eof:
                # Concatenated gzip members are one valid gzip stream (RFC 1952 section 2.2).
                data = self._inflater.unused_data
                self._inflater = _gunzipper()
                self._member_open = False
            else:
                data = self._inflater.unconsumed_tail

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._max_bytes:
            raise self._error(f"sent more than {self._max_bytes} bytes once decoded: is --dcgm.url "
                              "really dcgm-exporter's /metrics?", "too_large")
        if data:
            self._parts.append(data)

    def finish(self) -> bytes:
        if self._member_open:
            raise self._error(f"ended its response in the middle of a gzip stream after {self.wire_bytes} "
                              "bytes: is dcgm-exporter restarting?", "truncated")
        return b"".join(self._parts)


def _gunzipper():
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


class _Target:
    """Where and how to ask: host, port, path and headers of --dcgm.url, and a connection factory."""

    def __init__(self, scheme: str, host: str, port: Optional[int], path: str, headers: dict) -> None:
        self.host, self.port, self.path, self.headers = host, port, path, headers
        # One TLS context for all connections: building one loads the system's CA certificates.
        self._tls = ssl.create_default_context() if scheme == "https" else None

    @classmethod
    def parse(cls, url: str) -> "_Target":
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


class HttpSource:
    """dcgm-exporter's /metrics over HTTP, with a size cap and a deadline whatever the server does.

    The whole fetch — connecting, sending, the status line, headers and body — must be done by
    timeout_seconds after it began, however slowly the server trickles its answer.
    Plain http.client rather than requests: requests' per-request and per-chunk overhead made the
    fetch of a 1.5 MB scrape ~3x slower (benchmarks/perf.py), and we need none of its features.
    """

    def __init__(self, url: str, timeout_seconds: float, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if not url.lower().startswith(("http://", "https://")):
            raise ConfigError(f"--dcgm.url {redact_url(url)!r} must start with http:// or https://")
        if timeout_seconds <= 0:
            raise ConfigError(f"--dcgm.timeout must be positive, got {timeout_seconds!r}")
        if max_bytes <= 0:
            raise ConfigError(f"the dcgm response size cap must be positive, got {max_bytes!r}")
        self.url = url
        self.timeout_seconds = float(timeout_seconds)
        self.max_bytes = int(max_bytes)
        self._target = _Target.parse(url)
        self._connections = _ConnectionPool(self._target.connect, _IDLE_CONNECTIONS)

    def describe(self) -> str:
        return redact_url(self.url)  # for logs and messages: never the password

    def close(self) -> None:
        """Closes idle keep-alive connections; fetching again later opens new ones."""
        self._connections.close()

    def fetch(self) -> bytes:
        deadline = time.monotonic() + self.timeout_seconds
        connection = self._connections.acquire()
        try:
            response = self._send(connection, deadline, retry_stale=True)
            body = self._read_body(response)
        except BaseException:
            connection.close()  # never reuse a connection whose answer was not read to its end
            raise
        if getattr(response, "unread_bytes", False) or _closed_by_peer(connection):
            connection.close()  # bytes beyond the answer (or its end): never parsed as the next one
        else:
            self._connections.release(connection)
        return body

    def _send(self, connection: http.client.HTTPConnection, deadline: float, retry_stale: bool):
        """The response, once its status line and headers are in."""
        reused = connection.sock is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout()
        try:
            connection.timeout = remaining  # for connecting, when the connection is new
            if reused:
                connection.sock.settimeout(remaining)
            # getresponse() builds its response with the connection's response_class.
            connection.response_class = functools.partial(_DeadlineResponse, deadline=deadline)
            connection.request("GET", self._target.path, headers=self._target.headers)
            response = connection.getresponse()
        except socket.timeout as exc:
            raise self._timeout() from exc
        except ConnectionRefusedError as exc:
            raise self._error("refused the connection: is dcgm-exporter running and listening "
                              "there (see --dcgm.url)?", "refused") from exc
        except (ConnectionResetError, BrokenPipeError) as exc:
            # A kept-alive connection the server closed just as we reused it; a GET is safe to
            # send again, once, on a new connection (as Go's and urllib3's clients do).
            if reused and retry_stale:
                connection.close()
                return self._send(connection, deadline, retry_stale=False)
            raise self._error(f"could not be reached ({exc!r}): check --dcgm.url", "error") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._error(f"could not be asked ({exc!r}): check --dcgm.url", "error") from exc
        if response.status != 200:
            raise self._error(f"answered HTTP {response.status} instead of 200: check "
                              "dcgm-exporter's logs and that --dcgm.url names its /metrics path", "status")
        return response

    def _read_body(self, response: http.client.HTTPResponse) -> bytes:
        encoding = (response.getheader("Content-Encoding") or "").strip().lower()
        if encoding not in _GZIP_ENCODINGS + _IDENTITY_ENCODINGS:
            raise self._error(f"sent Content-Encoding {encoding!r}, which we did not ask for", "error")
        if encoding in _IDENTITY_ENCODINGS and (response.length or 0) > self.max_bytes:
            raise self._too_large()  # refuse before reading a byte of it
        if encoding in _IDENTITY_ENCODINGS and response.length is not None:
            text = self._read_sized(response)
        else:
            text = self._read_in_chunks(response, gzipped=encoding in _GZIP_ENCODINGS)
        if not text:
            raise self._error("answered 200 with an empty body; dcgm-exporter always sends at least "
                              "HELP/TYPE lines, so it is probably still starting or failing", "empty")
        return text

    def _read_sized(self, response: http.client.HTTPResponse) -> bytes:
        """A plain body of known length (within the cap), read straight into one buffer of that size:
        no chunks to collect and join, which matters at 1.5 MB per scrape."""
        with self._body_errors(received=None):
            return response.read()  # also closes the response: the connection may carry the next fetch

    def _read_in_chunks(self, response: http.client.HTTPResponse, gzipped: bool) -> bytes:
        """A chunked, gzip-encoded or unsized body, given up as soon as it passes the cap."""
        body = _Body(self.max_bytes, gzipped, self._error)
        while True:
            chunk = self._read_chunk(response, body.wire_bytes)
            if not chunk:
                break
            body.feed(chunk)
        if response.length:  # http.client counts down a Content-Length; EOF came before its end
            raise self._truncated(body.wire_bytes)
        response.close()  # read to its end: the connection may carry the next fetch
        return body.finish()

    def _read_chunk(self, response: http.client.HTTPResponse, received: int) -> bytes:
        with self._body_errors(received):
            # read1 returns whatever one socket read brings instead of waiting to fill the chunk.
            return response.read1(_READ_CHUNK_BYTES)

    @contextlib.contextmanager
    def _body_errors(self, received: Optional[int]):
        """Reading a response body: its failures as UpstreamErrors. `received` is what came before
        this read, None when a single read takes the whole body (then only a cut-short read knows).

        The response's reader bounds each socket read by the fetch's deadline (_DeadlineReader).
        """
        try:
            yield
        except socket.timeout as exc:
            raise self._timeout(received) from exc
        except http.client.IncompleteRead as exc:  # a body cut short, chunked or sized
            raise self._truncated(len(exc.partial) if received is None else received) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._error(f"failed while sending its response ({exc!r})", "error") from exc

    def _timeout(self, received: Optional[int] = None) -> UpstreamError:
        progress = "" if received is None else f" (got {received} bytes)"
        return self._error(f"did not send a complete response within {self.timeout_seconds:g}s"
                           f"{progress}: is dcgm-exporter overloaded or hung? raise --dcgm.timeout if its "
                           "scrapes are just slow", "timeout")

    def _truncated(self, received: int) -> UpstreamError:
        return self._error(f"closed the connection after {received} bytes, before the end of its "
                           "response: is dcgm-exporter restarting?", "truncated")

    def _too_large(self) -> UpstreamError:
        return self._error(f"sent more than {self.max_bytes} bytes: is --dcgm.url really "
                           "dcgm-exporter's /metrics?", "too_large")

    def _error(self, what: str, reason: str) -> UpstreamError:
        return UpstreamError(f"dcgm-exporter at {self.describe()} {what}", reason=reason)
