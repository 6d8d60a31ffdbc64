"""The HTTP side of the demo's Kubernetes API server: requests parsed and answered as the API server answers them."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Optional, Tuple
from urllib.parse import parse_qs, urlsplit

# URL path → (resource plural, group/version); namespaced paths carry /namespaces/<ns>/ before the plural.
_PATH = re.compile(r"/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?")
_DISCOVERY_PATH = re.compile(r"/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))")
MAX_WATCH_SECONDS = 600


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


def handler_class(api):
    """The request handler of one FakeKubeApi (exporter.demo.kube_api), asking its hooks at each step."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the exporter's log is what a user reads
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            authorization = self.headers.get("Authorization")
            discovery = _DISCOVERY_PATH.fullmatch(url.path)
            if discovery:
                version = discovery.group("core") or f"{discovery.group('group')}/{discovery.group('version')}"
                refused = api._admit("discover", version, "", None, None, authorization)
                if refused:
                    return self._send(*refused)
                if version not in api.served:
                    return self._send(404, _not_found())
                return self._send(200, api._discovery(version))
            match = _PATH.fullmatch(url.path)
            if not match:
                return self._send(404, status_object(404, "NotFound", f"the server could not find {url.path}"))
            self._resource(match, query, authorization)

        def _resource(self, match, query: dict, authorization: Optional[str]) -> None:
            version = match.group("core") or f"{match.group('group')}/{match.group('version')}"
            plural, name, namespace = match.group("plural"), match.group("name"), match.group("namespace")
            watching = query.get("watch") in ("1", "true")
            verb = "get" if name else "watch" if watching else "list"
            refused = api._admit(verb, plural, match.group("group") or "", namespace, name, authorization)
            if refused:
                return self._send(*refused)
            if version not in api.served:
                return self._send(404, _not_found())
            try:
                selector = parse_selector(query["fieldSelector"]) if query.get("fieldSelector") else None
            except ValueError as exc:
                return self._send(400, status_object(400, "BadRequest", str(exc)))
            selector = api._served_selector(selector)
            if name:
                return self._get(version, plural, namespace, name)
            if watching:
                return self._watch(version, plural, namespace, selector, query)
            limit, offset = int(query.get("limit", 0)), int(query.get("continue") or 0)
            return self._send(200, api._list(version, plural, namespace, selector, limit, offset))

        def _get(self, version, plural, namespace, name) -> None:
            obj = api._get(version, plural, namespace, name)
            if api._answer_get(self, plural, obj):
                return
            if obj is None:
                return self._send(404, status_object(404, "NotFound", f'{plural} "{name}" not found'))
            if "as=PartialObjectMetadata" in (self.headers.get("Accept") or ""):
                api._counted_metadata_get()
                return self._send(200, {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                        "metadata": obj["metadata"]})
            return self._send(200, obj)

        def _watch(self, version, plural, namespace, selector, query) -> None:
            since = int(query.get("resourceVersion") or 0)
            self.headers_sent = False
            if api._answer_watch(self, plural, since):
                return
            if not self.headers_sent:
                self.start_chunked()
            events = api._watch_events(version, plural, namespace, selector, since, api._watch_bookmarks(query),
                                       float(query.get("timeoutSeconds") or MAX_WATCH_SECONDS))
            try:
                for event in events:
                    self.chunk(api._event_line(plural, event))
                self.chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def start_chunked(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.headers_sent = True

        def chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _send(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
