"""The demo's Kubernetes API server (exporter/demo/kube_api.py) with what tests and benchmarks add: counts and faults.

Lists are JSON with metadata.resourceVersion (paged with limit/continue); `?watch=1` streams
newline-delimited events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) over chunked HTTP/1.1; a watch
from a compacted version gets 410 Gone (as an ERROR event with a Status object, or as an HTTP 410);
401 and 403 answers are Status objects; `fieldSelector=spec.nodeName=X` filters. Discovery
(`/api/v1`, `/apis/<group>/<version>`) lists the kinds served, custom ones included, and `/apis` the
groups (aggregated, with every version's kinds, when asked; recorded as ("discover", "apis")); a get with
`Accept: …;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` is answered with the metadata alone. Every
request is counted (with its time and bearer token), so a test can prove that scrapes make none.

Hostile behaviours, for tests of the client's bounds: `watch_behaviour` makes every watch stall after
its headers ("stall"), end at once ("end"), or answer 410 ("gone"); `send_raw(bytes)` puts raw bytes
(a huge or never-ending line) into the next watch of a resource; `corrupt_next_event(line)` sends `line` in
place of the next object event a watch of a resource would send (a rewatch from before it gets the event);
`ignore_field_selector` serves every node's pods.
"""

from __future__ import annotations

import json
import time
from typing import Dict, List, Optional, Tuple

from exporter.demo import kube_api as demo
from exporter.demo.kube_api_http import MAX_WATCH_SECONDS as _MAX_WATCH_SECONDS
from exporter.demo.kube_api_http import KubeApiHandler, ResourceRequest, status_object
from exporter.demo.kube_objects import (BUILT_IN_KINDS, CUSTOM_KINDS, make_pod, owner_reference,  # noqa: F401
                                        write_kubeconfig)


class _Handler(KubeApiHandler):
    """The demo's request handler, recording each request and answering as the test told its FakeKubeApi."""

    def _discover(self, version: str) -> None:
        # Every authenticated user may read discovery (the system:discovery role): recorded, never refused.
        self.api._record("discover", version, self.headers.get("Authorization"))
        super()._discover(version)

    def _discover_groups(self) -> None:
        self.api._record("discover", "apis", self.headers.get("Authorization"))  # `/apis`, aggregated or not
        super()._discover_groups()

    def _resource(self, request: ResourceRequest, query: dict) -> None:
        authorization = self.headers.get("Authorization")
        self.api._record(request.verb, request.plural, authorization)
        with self.api._cond:
            self.api.resource_requests.append((request.verb, request.group, request.plural))
        refused = self.api._refusal(request, authorization)
        if refused:
            return self._send(*refused)
        if self.api.ignore_field_selector:
            query.pop("fieldSelector", None)
        if self.api.bookmarks == "always":
            query["allowWatchBookmarks"] = "true"
        super()._resource(request, query)

    def _get(self, version, plural, namespace, name) -> None:
        obj = self.api._get(version, plural, namespace, name)
        if plural in self.api.hostile_gets:
            return _hostile_get(self.api, self, self.api.hostile_gets[plural], obj or {})
        if obj is not None and self.wants_metadata():
            with self.api._cond:
                self.api.metadata_gets += 1
        super()._get(version, plural, namespace, name)

    def event_line(self, plural: str, event: dict) -> bytes:
        with self.api._cond:
            corrupt = (self.api.corrupt_for_next_event.pop(plural, None)
                       if event["type"] in ("ADDED", "MODIFIED", "DELETED") else None)
        return super().event_line(plural, event) if corrupt is None else corrupt + b"\n"


class FakeKubeApi(demo.FakeKubeApi):
    """The demo's API server, counting every request and told to misbehave."""

    handler = _Handler

    def __init__(self, served_versions=("v1", "apps/v1", "batch/v1", "resource.k8s.io/v1")):
        super().__init__(served_versions)
        self.token: Optional[str] = None  # when set, requests need "Authorization: Bearer <token>"
        self.forbidden: Dict[str, str] = {}  # plural → verb refused with 403 ("list", "watch", "get")
        self.metadata_gets = 0  # gets answered as PartialObjectMetadata (metadata only)
        self.bookmarks = "requested"  # or "always": BOOKMARK events even when a watch did not ask for them
        self.bookmarks_sent = 0
        self.bookmarks_sent_to: Dict[str, int] = {}  # plural → BOOKMARK events sent on its watches
        self.gone_as_http = False  # answer a watch from a compacted version with HTTP 410, not an ERROR event
        self.requests: List[Tuple[str, str]] = []  # (verb, plural) of every request
        # (verb, API group, plural) of every resource request: two groups can serve one plural (queues).
        self.resource_requests: List[Tuple[str, str, str]] = []
        self.request_times: List[float] = []  # time.monotonic() of every request
        self.tokens: List[Optional[str]] = []  # the bearer token of every request (None: none sent)
        self.unauthorized = 0  # requests answered 401
        self.watch_behaviour: Optional[str] = None  # "stall", "end" or "gone": every watch does that
        self.ignore_field_selector = False  # as a proxy that drops the query's fieldSelector
        self.raw_for_next_watch: Dict[str, object] = {}  # plural → bytes, or an iterable of bytes, sent as-is
        self.raw_bytes_sent = 0
        self.corrupt_for_next_event: Dict[str, bytes] = {}  # plural → the line sent instead of its next event
        # plural → "trickle" (headers, then one byte at a time for ever) or "oversized" (the object, padded
        # past any answer a working server sends): how every get of that resource is answered.
        self.hostile_gets: Dict[str, str] = {}
        self._compacted = 0  # watches from a version below this get 410 Gone

    # --- the test's side -------------------------------------------------------------------------
    def request_count(self, verb: Optional[str] = None) -> int:
        with self._cond:
            return sum(1 for v, _ in self.requests if verb is None or v == verb)

    def requests_since(self, since: float, verb: Optional[str] = None, plural: Optional[str] = None) -> int:
        """Requests made at or after `since` (time.monotonic()), of one verb and resource if given."""
        with self._cond:
            return sum(1 for (v, p), t in zip(self.requests, self.request_times)
                       if t >= since and (verb is None or v == verb) and (plural is None or p == plural))

    def send_raw(self, data, plural: str = "pods") -> None:
        """The next watch of `plural` sends `data` (bytes, or an iterable of bytes chunks) before its events."""
        with self._cond:
            self.raw_for_next_watch[plural] = data

    def corrupt_next_event(self, line: bytes, plural: str = "pods") -> None:
        """The next ADDED, MODIFIED or DELETED event a watch of `plural` sends is replaced by `line` (cut JSON,
        binary junk…; a newline is added); the event stays in the history, so a watch from before it gets it."""
        with self._cond:
            self.corrupt_for_next_event[plural] = line

    def compact(self) -> None:
        """Forget every event so far, as etcd compaction does: open watches get an ERROR 410 event."""
        with self._cond:
            self._compacted = self._version + 1
            self._events.clear()
            self._generation += 1
            self._cond.notify_all()

    # --- the server's side, counted and misbehaving ---------------------------------------------
    def _record(self, verb: str, plural: str, authorization: Optional[str]) -> None:
        with self._cond:
            self.requests.append((verb, plural))
            self.request_times.append(time.monotonic())
            token = authorization[len("Bearer "):] if authorization and authorization.startswith("Bearer ") else None
            self.tokens.append(token)

    def _refusal(self, request: ResourceRequest, authorization: Optional[str]) -> Optional[Tuple[int, dict]]:
        """(status code, Status) to refuse a request with, or None to serve it."""
        if self.token is not None and authorization != f"Bearer {self.token}":
            with self._cond:
                self.unauthorized += 1
            return 401, status_object(401, "Unauthorized", "Unauthorized")
        verb, _, group, plural, namespace, name = request
        if self.forbidden.get(plural) == verb:
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            what = (f"{plural}.{group}" if group else plural) + (f' "{name}"' if name else "")
            return 403, status_object(403, "Forbidden", f'{what} is forbidden: User '
                                      f'"system:serviceaccount:gpu-monitoring:exporter" cannot {verb} resource '
                                      f'"{plural}" in API group "{group}" {scope}')
        return None

    def _watch_events(self, api, plural, namespace, selector, since, bookmarks, seconds):
        """The demo's events, after a 410 ERROR event where compaction took the version (or took place
        while watching), with the bookmarks sent counted."""
        with self._cond:  # the compaction and the generation read together: none slips between them
            compacted, generation = self._compacted, self._generation
        if since < compacted - 1:
            yield {"type": "ERROR", "object": status_object(410, "Expired", f"too old resource version: {since}")}
            return
        for event in self._events_after(generation, api, plural, namespace, selector, since, bookmarks, seconds):
            if event["type"] == "BOOKMARK":
                with self._cond:
                    self.bookmarks_sent += 1
                    self.bookmarks_sent_to[plural] = self.bookmarks_sent_to.get(plural, 0) + 1
            yield event
        with self._cond:
            expired = self._compacted != compacted and not self._stopped
        if expired and not self.gone_as_http:  # as HTTP: the watch ends, and the next one gets the 410
            yield {"type": "ERROR", "object": status_object(410, "Expired", "too old resource version")}

    def _answer_watch(self, handler, plural: str, since: int) -> bool:
        if self.watch_behaviour == "gone" or (self.gone_as_http and since and since < self._compacted - 1):
            handler._send(410, status_object(410, "Expired", f"too old resource version: {since}"))
            return True
        handler.start_chunked()
        if self.watch_behaviour in ("stall", "end"):
            _hostile_watch(self, handler, self.watch_behaviour)
            return True
        with self._cond:
            raw = self.raw_for_next_watch.pop(plural, None)
        if raw is not None:
            try:
                for data in [raw] if isinstance(raw, bytes) else raw:
                    handler.chunk(data)
                    self.raw_bytes_sent += len(data)
            except (BrokenPipeError, ConnectionResetError):
                handler.close_connection = True
                return True
        return False


def _hostile_watch(api: FakeKubeApi, handler, behaviour: str) -> None:
    """"stall": headers, then nothing until the client goes or the server stops; "end": no events."""
    handler.close_connection = True
    if behaviour == "stall":
        deadline = time.monotonic() + _MAX_WATCH_SECONDS
        while api.watch_behaviour == "stall" and not api._stopped and time.monotonic() < deadline:
            time.sleep(0.05)
    try:
        handler.chunk(b"")
    except (BrokenPipeError, ConnectionResetError):
        pass


def _hostile_get(api: FakeKubeApi, handler, behaviour: str, obj: dict) -> None:
    handler.close_connection = True
    padded = {**obj, "metadata": {**obj.get("metadata", {}), "annotations": {"padding": "x" * (5 << 20)}}}
    body = json.dumps(padded).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    try:
        if behaviour == "oversized":
            handler.wfile.write(body)
            return
        deadline = time.monotonic() + _MAX_WATCH_SECONDS
        while not api._stopped and time.monotonic() < deadline:  # JSON may start with any whitespace
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.2)
    except (BrokenPipeError, ConnectionResetError):
        pass
