"""The fake API server with the pod proxy route, answered as the real one answers it.

`GET /api/v1/namespaces/<ns>/pods/[https:]<name>:<port>/proxy/<path>` is forwarded to the pod's port
(`expose(namespace, name, port, "127.0.0.1:<real port>")`, where a real API server dials the pod IP;
over TLS, unchecked, for `https:<name>:<port>`),
or answered from a canned body (`serve_body`), or held open without an answer (`stall`), or answered
slowly (`trickle`: the headers, then a byte at a time, each `trickle_seconds` apart). As the real
server does: a pod it does not know is a 404 Status, a pod it cannot reach a 503 Status with "error
trying to reach service: dial tcp …: connect: connection refused", a user without `get` on
`pods/proxy` a 403 Status naming that resource. Lists honour `labelSelector` (equality forms).
Every proxied request is counted, with the most in flight at once; each pod's 200 answer is kept.
"""

from __future__ import annotations

import gzip
import http.client
import re
import socket
import ssl
import threading
import time
from typing import Dict, Tuple
from urllib.parse import urlsplit

from exporter.demo.kube_api_http import ResourceRequest, status_object
from support.fake_kube_api import FakeKubeApi, _Handler

_PROXY = re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?:(?P<scheme>https?):)?(?P<name>[^/:]+)"
                    r"(?::(?P<port>[^/]+))?/proxy(?P<path>/.*)?")
_FORWARDED = ("Accept", "Accept-Encoding")
_RETURNED = ("Content-Type", "Content-Encoding")


def _selected(labels: Dict[str, str], selector: str) -> bool:
    for part in filter(None, (p.strip() for p in selector.split(","))):
        key, operator, value = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)?\s*([^=!]*)", part).groups()
        if operator is None and key.startswith("!"):
            ok = key[1:] not in labels
        elif operator is None:
            ok = key in labels
        else:
            ok = (labels.get(key) == value) == (operator != "!=")
        if not ok:
            return False
    return True


class _ProxyHandler(_Handler):
    def do_GET(self):  # noqa: N802 - http.server's name
        match = _PROXY.fullmatch(urlsplit(self.path).path)
        if match:
            return self._proxy(match)
        return super().do_GET()

    def _resource(self, request: ResourceRequest, query: dict) -> None:
        selector = query.get("labelSelector")
        if not selector or request.verb != "list":
            return super()._resource(request, query)
        self.api._record(request.verb, request.plural, self.headers.get("Authorization"))
        refused = self.api._refusal(request, self.headers.get("Authorization"))
        if refused:
            return self._send(*refused)
        page = self.api._list(request.version, request.plural, request.namespace, None, 0, 0)
        page["items"] = [item for item in page["items"] if _selected(item["metadata"].get("labels") or {}, selector)]
        self._send(200, page)

    def _proxy(self, match: re.Match) -> None:
        api: PodProxyApi = self.api
        namespace, name, port = match.group("namespace"), match.group("name"), match.group("port") or ""
        if api.deny_proxy:
            return self._send(403, status_object(403, "Forbidden", (
                f'pods "{name}" is forbidden: User "system:serviceaccount:default:viewer" cannot get resource '
                f'"pods/proxy" in API group "" in the namespace "{namespace}"')))
        if api._get("v1", "pods", namespace, name) is None:
            return self._send(404, status_object(404, "NotFound", f'pods "{name}" not found'))
        api._enter()
        try:
            self._answer(api, (namespace, name, port), match.group("path") or "/", match.group("scheme") == "https")
        finally:
            api._leave()

    def _answer(self, api: "PodProxyApi", key: Tuple[str, str, str], path: str, tls: bool) -> None:
        if key in api.stalled:
            return self._stall(api.stall_seconds)
        if key in api.trickled:
            return self._trickle(api)
        if key in api.bodies:
            return self._raw(200, {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}, api.bodies[key])
        address = api.endpoints.get(key, "127.0.0.1:1")
        host, port = address.rsplit(":", 1)
        # `https:` before the pod's name: TLS to the pod, its certificate not checked (as the API server does).
        connection = (http.client.HTTPSConnection(host, int(port), timeout=api.dial_seconds,
                                                  context=ssl._create_unverified_context()) if tls
                      else http.client.HTTPConnection(host, int(port), timeout=api.dial_seconds))
        try:
            connection.request("GET", path, headers={h: self.headers[h] for h in _FORWARDED if self.headers.get(h)})
            answer = connection.getresponse()
            body = answer.read()
        except OSError as exc:
            return self._send(503, status_object(503, "ServiceUnavailable", (
                f"error trying to reach service: dial tcp {address}: connect: {_why(exc)}")))
        finally:
            connection.close()
        if answer.status == 200:
            api.answered.append((time.monotonic(), key, _decoded(body, answer.getheader("Content-Encoding"))))
        self._raw(answer.status, {h: answer.getheader(h) for h in _RETURNED if answer.getheader(h)}, body)

    def _stall(self, seconds: float) -> None:
        """No answer until the client hangs up (or `seconds` pass), as a proxied pod that never answers."""
        deadline = time.monotonic() + seconds
        self.connection.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                if not self.connection.recv(1, socket.MSG_PEEK):
                    break  # the client closed its end
            except socket.timeout:
                continue
            except OSError:
                break
        self.close_connection = True

    def _trickle(self, api: "PodProxyApi") -> None:
        """Each step just inside a read timeout of `trickle_seconds`: the headers after that long, then the
        body a byte at a time, as long; how long until the client hung up is kept in `trickle_held`."""
        started = time.monotonic()
        self.connection.settimeout(0.05)
        steps = [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 100000\r\n\r\n"]
        steps += [b"#"] * 1000
        try:
            for step in steps:
                if self._client_gone_within(api.trickle_seconds):
                    break
                self.connection.sendall(step)
        except OSError:
            pass
        finally:
            api.trickle_held.append(time.monotonic() - started)
            self.close_connection = True

    def _client_gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if not self.connection.recv(1, socket.MSG_PEEK):
                    return True
            except socket.timeout:
                continue
            except OSError:
                return True
        return False

    def _raw(self, code: int, headers: Dict[str, str], body: bytes) -> None:
        self.send_response(code)
        for header, value in headers.items():
            self.send_header(header, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _decoded(body: bytes, encoding) -> bytes:
    return gzip.decompress(body) if encoding == "gzip" else body


def _why(exc: OSError) -> str:
    return "connection refused" if isinstance(exc, ConnectionRefusedError) else str(exc) or type(exc).__name__


class PodProxyApi(FakeKubeApi):
    handler = _ProxyHandler

    def __init__(self):
        super().__init__(served_versions=("v1",))
        self.endpoints: Dict[Tuple[str, str, str], str] = {}  # (namespace, pod, port) → host:port dialled
        self.bodies: Dict[Tuple[str, str, str], bytes] = {}
        self.stalled = set()
        self.stall_seconds = 30.0
        self.trickled = set()
        self.trickle_seconds = 1.0
        self.trickle_held = []  # seconds each trickled answer lasted, until the client hung up
        self.dial_seconds = 10.0
        self.deny_proxy = False
        self.proxied = 0
        self.answered = []  # (monotonic time, (namespace, pod, port), its body) of each pod's 200, as passed on
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def expose(self, namespace: str, name: str, port: str, address: str) -> None:
        self.endpoints[(namespace, name, port)] = address

    def serve_body(self, namespace: str, name: str, port: str, body: bytes) -> None:
        self.bodies[(namespace, name, port)] = body

    def stall(self, namespace: str, name: str, port: str) -> None:
        self.stalled.add((namespace, name, port))

    def trickle(self, namespace: str, name: str, port: str) -> None:
        self.trickled.add((namespace, name, port))

    def _enter(self) -> None:
        with self._lock:
            self.proxied += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


