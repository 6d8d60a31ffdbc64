"""One exporter pod's /gpu/metrics through the API server's pod proxy, bounded in time and size."""

from __future__ import annotations

import json
import time
from typing import Dict, NamedTuple, Tuple

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
    """(when, the samples `top` reads) of one scrape; ScrapeFailed with a short reason otherwise."""
    from lightkube.core.generic_client import httpx

    remaining = min(access.timeout_seconds, deadline - time.monotonic())
    if remaining <= 0:
        raise ScrapeFailed("not scraped: the round's time ran out")
    own_deadline = time.monotonic() + remaining
    path = proxy_path(pod, access.scheme, access.port, access.path)
    try:
        with http.stream("GET", path, headers={"Accept": _ACCEPT, "Accept-Encoding": "gzip"},
                         timeout=httpx.Timeout(remaining)) as response:
            if response.status_code != 200:
                raise _refusal(response, pod)
            body = _bounded_body(response, access.max_body_bytes, own_deadline, remaining)
    except httpx.TimeoutException:
        raise ScrapeFailed(f"no answer within {remaining:.3g} s") from None
    except httpx.HTTPError as exc:
        raise ScrapeFailed(f"{type(exc).__name__}: {exc}") from None
    when = time.monotonic()
    return when, parse_text(body.decode("utf-8", "replace"))


def _bounded_body(response, limit: int, deadline: float, seconds: float) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():  # decoded (gzip) chunk by chunk: the cap holds on what is inflated
        body += chunk
        if len(body) > limit:
            raise ScrapeFailed(f"answer larger than {limit} bytes")
        if time.monotonic() > deadline:
            raise ScrapeFailed(f"answer took longer than {seconds:.3g} s")
    return bytes(body)


def _refusal(response, pod: ExporterPod) -> ScrapeFailed:
    """The API server's Status for a refused proxy: 403 (RBAC) stops the command, anything else names the pod."""
    raw = bytearray()
    for chunk in response.iter_raw():
        raw += chunk
        if len(raw) > _MAX_ERROR_BYTES:
            break
    try:
        message = json.loads(bytes(raw)).get("message") or ""
    except (ValueError, AttributeError):
        message = ""
    code = response.status_code
    if code in (401, 403):
        return ScrapeFailed(f"the Kubernetes API server refused `get` on pods/proxy in namespace {pod.namespace} "
                            f"(HTTP {code}{': ' + message if message else ''})", denied=True)
    return ScrapeFailed(f"HTTP {code}{': ' + message if message else ''}")
