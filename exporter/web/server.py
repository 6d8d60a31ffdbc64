"""HTTP routes: /gpu/metrics (attributed dcgm samples), /metrics (own process), /healthz and /."""

from __future__ import annotations

import errno
import html
import io
import os
import platform
import selectors
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.base.logs import log
from exporter.web.connections import ConnectionTable
from exporter.web.negotiation import encode_for
from exporter.web.routes import HEALTH_PATH, INDEX_PATH, SELF_METRICS_PATH
from exporter.web.scrape import ScrapeBody
from exporter.web.webconfig import WWW_AUTHENTICATE

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
# Slow or idle clients must not hold a request thread for long (slowloris); Prometheus sends
# its whole request at once. An idle keep-alive connection is closed after REQUEST_TIMEOUT_SECONDS;
# once a request has begun, its line and headers must all arrive within REQUEST_HEAD_TIMEOUT_SECONDS
# and REQUEST_HEAD_MAX_BYTES (a socket timeout alone restarts with every byte received).
REQUEST_TIMEOUT_SECONDS = 30
REQUEST_HEAD_TIMEOUT_SECONDS = 10
REQUEST_HEAD_MAX_BYTES = 64 * 1024
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

    def __init__(self, host: str, port: int, app: "App", ssl_context: Optional[ssl.SSLContext] = None,
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
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self._stop_requested:
                for key, _ in selector.select():
                    if key.fileobj is self and not self._stop_requested:
                        self._handle_request_noblock()

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
    def listen(cls, host: str, port: int, app: "App", ssl_context: Optional[ssl.SSLContext] = None):
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


class App:
    """What the routes serve; kept apart from the HTTP plumbing so handlers stay small."""

    def __init__(self, scraper, attribution, telemetry_path: str, web_config=None):
        self.scraper = scraper
        self.attribution = attribution
        self.telemetry_path = telemetry_path
        # A WebConfig, or a ReloadingWebConfig that keeps one current (its `current()`), or None.
        self._web_config = web_config
        self.registry = CollectorRegistry()
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(PlatformCollector(registry=None))
        self._self_collector = _SelfCollector(scraper, attribution)
        self.registry.register(self._self_collector)
        self.registry.register(_BuildInfoCollector())
        self.requests_lock = threading.Lock()

    @property
    def web_config(self):
        """The web config in force now: asked for on every request and every new TLS connection."""
        config = self._web_config
        return config.current() if hasattr(config, "current") else config

    def count_connections(self, connections: ConnectionTable) -> None:
        """Expose the server's connection counters on /metrics."""
        self._self_collector.connections = connections

    def index_page(self) -> bytes:
        path = html.escape(self.telemetry_path)
        return (
            "<!doctype html><html><head><title>pod-gpu-metrics-exporter</title></head><body>"
            "<h1>pod-gpu-metrics-exporter</h1>"
            "<p>NVIDIA dcgm-exporter metrics labelled with the pod that holds each GPU.</p><ul>"
            f'<li><a href="{path}">{path}</a> GPU metrics with namespace/pod/container labels</li>'
            f'<li><a href="{SELF_METRICS_PATH}">{SELF_METRICS_PATH}</a> this process\'s own metrics</li>'
            f'<li><a href="{HEALTH_PATH}">{HEALTH_PATH}</a> liveness</li>'
            "</ul></body></html>\n"
        ).encode()


class _SelfCollector:
    """Counters kept by the scraper and the refresher, exposed on /metrics."""

    def __init__(self, scraper, attribution):
        self._scraper = scraper
        self._attribution = attribution
        self.connections: Optional[ConnectionTable] = None  # the server's, once a server serves this app

    def collect(self):
        yield _counter("pod_gpu_exporter_scrapes", "Scrapes of the telemetry path answered.", self._scraper.scrapes)
        yield _counter("pod_gpu_exporter_rewrites", "Upstream bodies rewritten; the other scrapes reused the last rewrite.", self._scraper.rewrites)
        yield _counter("pod_gpu_exporter_rewrite_seconds", "Time spent rewriting upstream bodies (divide by pod_gpu_exporter_rewrites_total for the mean).", self._scraper.rewrite_seconds)
        yield _counter("pod_gpu_exporter_dcgm_fetch_failures", "Failed fetches of dcgm-exporter's metrics.", self._scraper.upstream_failures)
        yield _counter("pod_gpu_exporter_malformed_lines", "Upstream lines dropped as malformed, over all scrapes.", self._scraper.malformed_lines)
        yield _counter("pod_gpu_exporter_kubelet_list_calls", "PodResources List calls made to the kubelet.", self._attribution.list_calls)
        yield _counter("pod_gpu_exporter_kubelet_list_failures", "PodResources List calls that failed.", self._attribution.list_failures)
        if self.connections is not None:
            yield _counter("pod_gpu_exporter_http_connections_refused", "New connections closed at once because every connection slot was answering a request.", self.connections.refused)
            yield _counter("pod_gpu_exporter_http_idle_connections_closed", "Idle connections closed to make room for new ones when every slot was taken.", self.connections.evicted)


class _BuildInfoCollector:
    """pod_gpu_exporter_build_info: which release runs on which Python, as node_exporter's *_build_info does."""

    def collect(self):
        info = GaugeMetricFamily("pod_gpu_exporter_build_info",
                                 "A constant 1, labelled with the exporter's version and the Python version running it.",
                                 labels=["version", "python_version"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


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
    server: ExporterHTTPServer
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
        app = self.server.app
        path = self.path.split("?", 1)[0]
        if self.headers.get("Content-Length", "0") not in ("", "0") or self.headers.get("Transfer-Encoding"):
            return self._reply(400, b"request bodies are not accepted\n", "text/plain; charset=utf-8", send_body, close=True)
        if not self._authorized(app, path):
            return
        if path == app.telemetry_path:
            self._reply(200, app.scraper.scrape_body(), TEXT_FORMAT, send_body)
        elif path == SELF_METRICS_PATH:
            self._reply(200, generate_latest(app.registry), TEXT_FORMAT, send_body)
        elif path == HEALTH_PATH:
            self._reply(200, b"ok\n", "text/plain; charset=utf-8", send_body)
        elif path == INDEX_PATH:
            self._reply(200, app.index_page(), "text/html; charset=utf-8", send_body)
        else:
            self._reply(404, b"not found\n", "text/plain; charset=utf-8", send_body)

    def _authorized(self, app, path: str) -> bool:
        config = app.web_config
        if config is None or not config.path_requires_auth(path):
            return True
        if config.check_basic_auth(self.headers.get("Authorization")):
            return True
        self._reply(401, b"unauthorized\n", "text/plain; charset=utf-8", self.command != "HEAD",
                    extra_headers={"WWW-Authenticate": WWW_AUTHENTICATE})
        return False

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
