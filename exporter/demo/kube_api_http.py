"""The HTTP side of the demo's Kubernetes API server: requests parsed and answered as the API server answers them."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import NamedTuple, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

# URL path → (resource plural, group/version); namespaced paths carry /namespaces/<ns>/ before the plural.
_PATH = re.compile(r"/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?")
_DISCOVERY_PATH = re.compile(r"/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))")
MAX_WATCH_SECONDS = 600
# What an API server (1.30 and later) answers `GET /apis` with when asked for aggregated discovery.
AGGREGATED_DISCOVERY_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def status_object(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def parse_selector(text: str) -> Tuple[str, str]:
    match = re.fullmatch(r"(spec\.nodeName|spec\.driver|metadata\.name)==?([^,]*)", text)
    if not match:
        raise ValueError(f'"{text}" is not a known field selector')
    return match.group(1), match.group(2)


def _not_found() -> dict:
    return status_object(404, "NotFound", "the server could not find the requested resource")


class ResourceRequest(NamedTuple):
    """What a request to a resource path asks for."""

    verb: str  # get, list or watch
    version: str  # group/version ("v1" for the core group)
    group: str  # "" for the core group
    plural: str
    namespace: Optional[str]
    name: Optional[str]


def resource_request(match: re.Match, query: dict) -> ResourceRequest:
    """The request a matched resource path (with its query) makes."""
    name = match.group("name")
    verb = "get" if name else "watch" if query.get("watch") in ("1", "true") else "list"
    version = match.group("core") or f"{match.group('group')}/{match.group('version')}"
    return ResourceRequest(verb, version, match.group("group") or "", match.group("plural"),
                           match.group("namespace"), name)


class KubeApiHandler(BaseHTTPRequestHandler):
    """Answers requests from the objects of one FakeKubeApi (exporter.demo.kube_api): `handler_class` binds it."""

    protocol_version = "HTTP/1.1"
    api = None  # the FakeKubeApi served

    def log_message(self, *args):  # quiet: the exporter's log is what a user reads
        pass

    def setup(self):
        super().setup()
        self.api.connections.opened(self.connection)

    def finish(self):
        self.api.connections.closed(self.connection)
        super().finish()

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path.rstrip("/") == "/apis":
            return self._discover_groups()
        discovery = _DISCOVERY_PATH.fullmatch(url.path)
        if discovery:
            return self._discover(discovery.group("core") or f"{discovery.group('group')}/{discovery.group('version')}")
        match = _PATH.fullmatch(url.path)
        if not match:
            return self._send(404, status_object(404, "NotFound", f"the server could not find {url.path}"))
        self._resource(resource_request(match, query), query)

    def _discover(self, version: str) -> None:
        if version not in self.api.served:
            return self._send(404, _not_found())
        return self._send(200, self.api._discovery(version))

    def _discover_groups(self) -> None:
        """`/apis`: the aggregated APIGroupDiscoveryList when the client asks for it (and the server has it),
        else the plain APIGroupList, as an API server chooses by the Accept header."""
        if self.api.aggregated_discovery and self.wants_aggregated_discovery():
            return self._send(200, self.api._aggregated_discovery(), AGGREGATED_DISCOVERY_TYPE)
        return self._send(200, self.api._group_list())

    def wants_aggregated_discovery(self) -> bool:
        accept = self.headers.get("Accept") or ""
        return any("g=apidiscovery.k8s.io" in part and "v=v2" in part and "as=APIGroupDiscoveryList" in part
                   for part in accept.split(","))

    def _resource(self, request: ResourceRequest, query: dict) -> None:
        # A group/version not served, or a kind it does not serve (a CRD not installed, a feature gate off):
        # 404, as the API server answers.
        if request.version not in self.api.served or (request.version, request.plural) not in self.api.kinds:
            return self._send(404, _not_found())
        try:
            selector = parse_selector(query["fieldSelector"]) if query.get("fieldSelector") else None
        except ValueError as exc:
            return self._send(400, status_object(400, "BadRequest", str(exc)))
        if request.name:
            return self._get(request.version, request.plural, request.namespace, request.name)
        if request.verb == "watch":
            return self._watch(request.version, request.plural, request.namespace, selector, query)
        limit, offset = int(query.get("limit", 0)), int(query.get("continue") or 0)
        return self._send(200, self.api._list(request.version, request.plural, request.namespace, selector, limit,
                                              offset))

    def _get(self, version, plural, namespace, name) -> None:
        obj = self.api._get(version, plural, namespace, name)
        if obj is None:
            return self._send(404, status_object(404, "NotFound", f'{plural} "{name}" not found'))
        if self.wants_metadata():
            return self._send(200, {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                    "metadata": obj["metadata"]})
        return self._send(200, obj)

    def wants_metadata(self) -> bool:
        """Whether a get asks for PartialObjectMetadata, the object's metadata alone."""
        return "as=PartialObjectMetadata" in (self.headers.get("Accept") or "")

    def _watch(self, version, plural, namespace, selector, query) -> None:
        since = int(query.get("resourceVersion") or 0)
        self.headers_sent = False
        if self.api._answer_watch(self, plural, since):
            return
        if not self.headers_sent:
            self.start_chunked()
        events = self.api._watch_events(version, plural, namespace, selector, since,
                                        query.get("allowWatchBookmarks") == "true",
                                        float(query.get("timeoutSeconds") or MAX_WATCH_SECONDS))
        try:
            for event in events:
                self.chunk(self.event_line(plural, event))
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        # Ended whole (timeoutSeconds, or every watch ended), the connection stays open for the next request,
        # as an API server's does: closing it unannounced races the client, which reuses it at once for its
        # next watch and reads "Server disconnected".

    def event_line(self, plural: str, event: dict) -> bytes:
        """One watch event as the line sent."""
        return json.dumps(event).encode() + b"\n"

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.headers_sent = True

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send(self, code: int, obj: dict, content_type: str = "application/json") -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def handler_class(api, base=KubeApiHandler):
    """`base` (KubeApiHandler or a subclass) bound to the FakeKubeApi `api`, for a ThreadingHTTPServer."""
    return type(base.__name__, (base,), {"api": api})
