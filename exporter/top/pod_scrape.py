"""One exporter pod's /gpu/metrics through the API server's pod proxy, bounded in time and size."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager
from typing import Dict, NamedTuple, Tuple

from exporter.base.bounded_body import BodyTooLarge, BodyTooSlow, read_bounded, read_head
from exporter.top.readings import parse_text

_MAX_ERROR_BYTES = 64 * 1024  # of a refusal's Status object
# The text format only: the exporter answers it to any Accept, and the line reader reads nothing else.
_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


class ExporterPod(NamedTuple):
    namespace: str
    name: str
    node: str
    phase: str


class ScrapeFailed(Exception):
    """This pod could not be scraped; `denied`: the API server refused the proxy (RBAC), true of every pod."""

    def __init__(self, message: str, denied: bool = False):
        super().__init__(message)
        self.message, self.denied = message, denied


def proxy_path(pod: ExporterPod, scheme: str, port: str, path: str) -> str:
    """The API server's proxy route to a pod's port: `https:` before the name when the exporter serves TLS."""
    target = f"{'https:' if scheme == 'https' else ''}{pod.name}:{port}"
    return f"/api/v1/namespaces/{pod.namespace}/pods/{target}/proxy{path}"


def scrape_pod(http, pod: ExporterPod, access, deadline: float) -> Tuple[float, Dict]:
    """(when, the samples `top` reads) of one scrape; ScrapeFailed with a short reason otherwise.

    One deadline bounds the whole scrape: connecting, the headers and the body. httpx's timeouts bound
    each step alone (a pod answering its headers just in time, then stalling, held a scrape twice as
    long), so each step is given what is left, and a body still coming at the deadline is cut."""
    from lightkube.core.generic_client import httpx

    remaining = min(access.timeout_seconds, deadline - time.monotonic())
    if remaining <= 0:
        raise ScrapeFailed("not scraped: the round's time ran out")
    own = _Deadline(time.monotonic() + remaining)
    path = proxy_path(pod, access.scheme, access.port, access.path)
    try:
        with http.stream("GET", path, headers={"Accept": _ACCEPT, "Accept-Encoding": "gzip"},
                         timeout=httpx.Timeout(remaining), extensions={"trace": own.tighten}) as response:
            with own.cut_at_deadline(response):
                if response.status_code != 200:
                    raise _refusal(response, pod)
                body = _bounded_body(response, access.max_body_bytes, own.at, remaining)
    except httpx.HTTPError as exc:
        if own.cut or (own.answering and isinstance(exc, httpx.TimeoutException)):
            raise ScrapeFailed(f"answer took longer than {remaining:.3g} s") from None
        if isinstance(exc, httpx.TimeoutException):
            raise ScrapeFailed(f"no answer within {remaining:.3g} s") from None
        raise ScrapeFailed(f"{type(exc).__name__}: {exc}") from None
    when = time.monotonic()
    return when, parse_text(body.decode("utf-8", "replace"))


class _Deadline:
    """One point in time for every step of a scrape."""

    def __init__(self, at: float):
        self.at, self.cut = at, False
        self.answering = False  # the headers came: what is late is the body

    def _left(self) -> float:
        return max(0.001, self.at - time.monotonic())

    def tighten(self, event: str, info: dict) -> None:
        """httpcore's trace hook, called as each step starts: that step may wait only what is left.
        (Connecting reads its `timeout` from these arguments; sending and receiving read the request's.)"""
        if not event.endswith(".started"):
            return
        if "timeout" in info:
            info["timeout"] = self._left()
        request = info.get("request")
        timeouts = getattr(request, "extensions", {}).get("timeout")
        if isinstance(timeouts, dict):
            for step in ("read", "write", "pool", "connect"):
                timeouts[step] = self._left()

    @contextmanager
    def cut_at_deadline(self, response):
        """The body's reads each wait up to their own timeout, and a trickle never lets one expire: at the
        deadline the connection is shut down, which ends a read blocked in another thread at once."""
        self.answering = True
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        timer = threading.Timer(max(0.0, self.at - time.monotonic()), self._shut, (sock,))
        timer.daemon = True
        if sock is not None:
            timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _shut(self, sock: socket.socket) -> None:
        self.cut = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed: the scrape ended meanwhile


def _bounded_body(response, limit: int, deadline: float, seconds: float) -> bytes:
    try:  # decoded (gzip) chunk by chunk: the cap holds on what is inflated
        return read_bounded(response.iter_bytes(), limit, deadline)
    except BodyTooLarge:
        raise ScrapeFailed(f"answer larger than {limit} bytes") from None
    except BodyTooSlow:
        raise ScrapeFailed(f"answer took longer than {seconds:.3g} s") from None


def _refusal(response, pod: ExporterPod) -> ScrapeFailed:
    """A scrape answered other than 200. The API server's own refusal is a Kubernetes Status object:
    a 401/403 one is RBAC (or the user's credentials), true of every pod, and stops the command. A
    401/403 in any other body is the exporter's, passed through the proxy: that node alone fails."""
    try:
        status = json.loads(read_head(response.iter_raw(), _MAX_ERROR_BYTES))
    except ValueError:
        status = None
    from_api_server = isinstance(status, dict) and status.get("kind") == "Status"
    message = (status.get("message") or "") if from_api_server else ""
    code = response.status_code
    if code in (401, 403) and from_api_server:
        return ScrapeFailed(f"the Kubernetes API server refused `get` on pods/proxy in namespace {pod.namespace} "
                            f"(HTTP {code}{': ' + message if message else ''})", denied=True)
    if code in (401, 403):
        return ScrapeFailed("the exporter asks for credentials (web config basic auth)")
    return ScrapeFailed(f"HTTP {code}{': ' + message if message else ''}")
