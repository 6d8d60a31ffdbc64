"""The listening HTTP server: dual-stack bind, connection slots, TLS handshakes off the accept loop."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import signal
import socket
import ssl
import threading
from http.server import ThreadingHTTPServer
from typing import Optional

from exporter.base.logs import log
from exporter.web.connections import ConnectionTable
from exporter.web.handler import RequestHandler
from exporter.web.service import App

# The whole handshake, however its bytes trickle (CPython bounds do_handshake by one deadline).
TLS_HANDSHAKE_TIMEOUT_SECONDS = 5
# Each connection holds a thread; past this many at once, the longest-idle connection is closed to
# make room (exporter.web.connections), so a flood of idle connections can neither exhaust memory nor
# lock out scrapes. Prometheus needs one per server scraping us.
MAX_CONNECTIONS = 64
# The first bytes of a plain HTTP request, which Go's TLS servers answer with a 400 instead of a
# reset (net/http: tlsRecordHeaderLooksLikeHTTP); a TLS connection starts with 0x16.
_PLAIN_HTTP_STARTS = (b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO")
_PLAIN_HTTP_ANSWER = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"


class ExporterHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that can listen dual-stack and run TLS handshakes off the accept loop."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, host: str, port: int, app: App, ssl_context: Optional[ssl.SSLContext] = None,
                 family: Optional[socket.AddressFamily] = None):
        self.app = app
        self.ssl_context = ssl_context
        self._stop_requested = False
        self._wake_read, self._wake_write = os.pipe()  # stop() writes a byte: serve_until_stopped wakes
        os.set_blocking(self._wake_write, False)
        self.connections = ConnectionTable(MAX_CONNECTIONS)
        app.count_connections(self.connections)
        if family is None:
            family = socket.AF_INET6 if host == "" or ":" in host else socket.AF_INET
        self.address_family = family
        bind_host = "::" if host == "" and family == socket.AF_INET6 else host
        super().__init__((bind_host, port), RequestHandler, bind_and_activate=False)
        try:
            if host == "" and family == socket.AF_INET6:
                # ':9400' means every interface, IPv4 included (dual-stack), as Go's net.Listen does.
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self.server_bind()
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def serve_until_stopped(self) -> None:
        """Accept connections until stop(). socketserver's serve_forever wakes every poll_interval
        to look for a shutdown() request, several times a second in an idle process; this loop
        sleeps until a connection or stop() arrives."""
        os.set_blocking(self._wake_read, False)
        with selectors.DefaultSelector() as selector, _signals_wake(self._wake_write):
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self._stop_requested:
                for key, _ in selector.select():
                    if key.fileobj is self and not self._stop_requested:
                        self._handle_request_noblock()
                    elif key.fileobj is self._wake_read:
                        _drain(self._wake_read)  # a signal other than ours to stop, or stop() itself

    def stop(self) -> None:
        """Make serve_until_stopped return at once; safe to call from a signal handler."""
        self._stop_requested = True
        try:
            os.write(self._wake_write, b"\0")
        except (BlockingIOError, OSError):
            pass  # the pipe is full of earlier wake-ups (the loop wakes anyway), or already closed

    def server_close(self) -> None:
        super().server_close()
        # Once only: a descriptor number closed twice may by then belong to another file.
        descriptors, (self._wake_read, self._wake_write) = (self._wake_read, self._wake_write), (-1, -1)
        for descriptor in descriptors:
            if descriptor >= 0:
                os.close(descriptor)

    @classmethod
    def listen(cls, host: str, port: int, app: App, ssl_context: Optional[ssl.SSLContext] = None):
        """Bind HOST:PORT; an empty host is every interface, dual-stack where the kernel has IPv6."""
        try:
            return cls(host, port, app, ssl_context)
        except OSError as exc:
            if host != "" or exc.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                raise
        # A kernel booted without IPv6 (ipv6.disable=1): every IPv4 interface, as Go falls back to.
        return cls(host, port, app, ssl_context, family=socket.AF_INET)

    def process_request(self, request, client_address):
        if not self.connections.admit(request, client_address[0]):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release(request)
            raise

    def process_request_thread(self, request, client_address):
        self.connections.bind(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release(request)

    @property
    def bound_address(self) -> str:
        host, port = self.server_address[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def finish_request(self, request, client_address):
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        tls = self._tls_handshake(request, client_address[0])
        if tls is not None:
            # The raw socket the mixin shuts down afterwards is detached by wrap_socket: close ours.
            with tls:
                super().finish_request(tls, client_address)

    def _tls_handshake(self, request: socket.socket, client: str) -> Optional[ssl.SSLSocket]:
        """The connection over TLS, or None (answered 400 as plain HTTP, or a failed handshake).
        It runs in the connection's own thread, so a slow client cannot stall accept()."""
        request.settimeout(TLS_HANDSHAKE_TIMEOUT_SECONDS)  # one deadline for the whole handshake
        try:
            if _answered_plain_http(request):
                return None
            # The certificates in force now (a re-read web config), else those of start-up.
            context = getattr(self.app.web_config, "ssl_context", lambda: None)() or self.ssl_context
            tls = context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except (ssl.SSLError, OSError) as exc:
            log("debug", "TLS handshake failed", client=client, error=str(exc))
            return None
        # Before the handshake: a stalled one is then closed like any idle connection.
        self.connections.replace(tls)
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError) as exc:
            tls.close()
            log("debug", "TLS handshake failed", client=client, error=str(exc))
            return None
        return tls

    def handle_error(self, request, client_address):
        log("debug", "connection error", client=client_address[0], exc_info=True)


def _answered_plain_http(request: socket.socket) -> bool:
    """Answer 400 to a plain HTTP request sent to the TLS port, as exporter-toolkit does."""
    if request.recv(5, socket.MSG_PEEK) not in _PLAIN_HTTP_STARTS:
        return False
    request.sendall(_PLAIN_HTTP_ANSWER)
    return True


@contextlib.contextmanager
def _signals_wake(descriptor: int):
    """While the loop runs, every signal also writes to the wake pipe (signal.set_wakeup_fd).

    The kernel may hand a process's SIGTERM or SIGINT to any of its threads (gRPC's, a refresher's):
    Python then runs the handler on the main thread only once that thread wakes, and the loop sleeps in
    select() until a connection comes. The byte in the pipe wakes it, so the handler runs at once.
    Only the main thread may set it; elsewhere (a server run by a test's thread) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.set_wakeup_fd(descriptor, warn_on_full_buffer=False)
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)  # before the pipe is closed: its number may be reused


def _drain(descriptor: int) -> None:
    try:
        while os.read(descriptor, 4096):
            pass
    except (BlockingIOError, OSError):
        pass  # empty, or closed
