"""A Kubernetes API server on loopback speaking the real REST + watch protocol, for tests and benchmarks.

Lists are JSON with metadata.resourceVersion (paged with limit/continue); `?watch=1` streams
newline-delimited events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) over chunked HTTP/1.1; a watch
from a compacted version gets 410 Gone (as an ERROR event with a Status object, or as an HTTP 410);
401 and 403 answers are Status objects; `fieldSelector=spec.nodeName=X` filters. Discovery
(`/api/v1`, `/apis/<group>/<version>`) lists the kinds served, custom ones included; a get with
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
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

# URL path → (resource plural, group/version); namespaced paths carry /namespaces/<ns>/ before the plural.
_PATH = re.compile(r"/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?")
_DISCOVERY_PATH = re.compile(r"/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))")
# (api version, plural) → (kind, namespaced): what discovery lists; `FakeKubeApi.serve_kind` adds more.
BUILT_IN_KINDS = {
    ("v1", "pods"): ("Pod", True), ("v1", "namespaces"): ("Namespace", False),
    ("apps/v1", "replicasets"): ("ReplicaSet", True), ("apps/v1", "deployments"): ("Deployment", True),
    ("apps/v1", "statefulsets"): ("StatefulSet", True), ("apps/v1", "daemonsets"): ("DaemonSet", True),
    ("batch/v1", "jobs"): ("Job", True), ("batch/v1", "cronjobs"): ("CronJob", True),
    ("resource.k8s.io/v1", "resourceslices"): ("ResourceSlice", False),
    ("resource.k8s.io/v1", "resourceclaims"): ("ResourceClaim", True),
    ("resource.k8s.io/v1beta1", "resourceslices"): ("ResourceSlice", False),
    ("resource.k8s.io/v1beta1", "resourceclaims"): ("ResourceClaim", True),
}
# The custom resources of the controllers GPU clusters run, as their CRDs name them.
CUSTOM_KINDS = {
    ("argoproj.io/v1alpha1", "rollouts"): ("Rollout", True),
    ("jobset.x-k8s.io/v1alpha2", "jobsets"): ("JobSet", True),
    ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"): ("LeaderWorkerSet", True),
}
_BOOKMARK_INTERVAL_SECONDS = 1.0
_MAX_WATCH_SECONDS = 600


def status_object(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeKubeApi:
    """Objects by (api version path, plural) → {(namespace, name): object}; one resourceVersion counter."""

    def __init__(self, served_versions=("v1", "apps/v1", "batch/v1", "resource.k8s.io/v1")):
        self.served = set(served_versions)
        self.kinds = dict(BUILT_IN_KINDS)
        self.token: Optional[str] = None  # when set, requests need "Authorization: Bearer <token>"
        self.forbidden: Dict[str, str] = {}  # plural → verb refused with 403 ("list", "watch", "get")
        self.metadata_gets = 0  # gets answered as PartialObjectMetadata (metadata only)
        self.bookmarks = "requested"  # or "always": BOOKMARK events even when a watch did not ask for them
        self.bookmarks_sent = 0
        self.bookmarks_sent_to: Dict[str, int] = {}  # plural → BOOKMARK events sent on its watches
        self.gone_as_http = False  # answer a watch from a compacted version with HTTP 410, not an ERROR event
        self.requests: List[Tuple[str, str]] = []  # (verb, plural) of every request
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
        self._cond = threading.Condition()
        self._objects: Dict[Tuple[str, str], Dict[Tuple[str, str], dict]] = {}
        self._events: List[Tuple[int, str, str, dict]] = []  # (rv, group path + plural, type, object)
        self._version = 1
        self._compacted = 0  # watches from a version below this get 410 Gone
        self._generation = 0  # bumped to end every open watch
        self._server: Optional[ThreadingHTTPServer] = None
        self._stopped = False

    # --- the test's side -------------------------------------------------------------------------
    def start(self, port: int = 0) -> "FakeKubeApi":
        """Serve on loopback; a stopped server can be started again on its old port (`port`)."""
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        server.daemon_threads = True
        self._server, self._stopped = server, False
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            # Stop accepting first: a watch ended before that would be re-opened at once and outlive us.
            self._server.shutdown()
            self._server.server_close()
            self._stopped = True  # a watch accepted just before the shutdown ends too
            self.close_watches()
            self._server = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve_kind(self, api: str, plural: str, kind: str, namespaced: bool = True) -> None:
        """Serve one more kind (a CRD installed): listed by discovery, readable by get."""
        self.served.add(api)
        self.kinds[(api, plural)] = (kind, namespaced)

    def put_owner(self, api: str, plural: str, namespace: str, name: str, owner=None, controller: bool = True) -> dict:
        """An object of any kind (a ReplicaSet, a Rollout, a leader Pod…) with `owner` (apiVersion, kind,
        name) as its ownerReference; a spec of some size, as real ones have, that a metadata read skips."""
        kind, namespaced = self.kinds[(api, plural)]
        meta = {"name": name, **({"namespace": namespace} if namespaced else {})}
        if owner is not None:
            meta["ownerReferences"] = [owner_reference(*owner, controller=controller)]
        return self.put(api, plural, {"apiVersion": api, "kind": kind, "metadata": meta,
                                      "spec": {"selector": {"matchLabels": {"app": name}},
                                               "template": {"metadata": {"labels": {"app": name}},
                                                            "spec": {"containers": [{"name": "main"}] * 20}}}})

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

    def put(self, api: str, plural: str, obj: dict) -> dict:
        """Create or replace an object (ADDED or MODIFIED event); returns it with its new resourceVersion."""
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        key = (meta.get("namespace", ""), meta["name"])
        with self._cond:
            store = self._objects.setdefault((api, plural), {})
            kind = "MODIFIED" if key in store else "ADDED"
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            store[key] = obj
            self._events.append((self._version, f"{api}/{plural}", kind, obj))
            self._cond.notify_all()
        return obj

    def delete(self, api: str, plural: str, namespace: str, name: str) -> None:
        with self._cond:
            obj = self._objects.get((api, plural), {}).pop((namespace, name), None)
            if obj is None:
                return
            self._version += 1
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = str(self._version)
            self._events.append((self._version, f"{api}/{plural}", "DELETED", obj))
            self._cond.notify_all()

    def compact(self) -> None:
        """Forget every event so far, as etcd compaction does: open watches get an ERROR 410 event."""
        with self._cond:
            self._compacted = self._version + 1
            self._events.clear()
            self._generation += 1
            self._cond.notify_all()

    def close_watches(self) -> None:
        """End every open watch cleanly, as an API server does when timeoutSeconds runs out."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    # --- the server's side -----------------------------------------------------------------------
    def _record(self, verb: str, plural: str, authorization: Optional[str]) -> None:
        with self._cond:
            self.requests.append((verb, plural))
            self.request_times.append(time.monotonic())
            token = authorization[len("Bearer "):] if authorization and authorization.startswith("Bearer ") else None
            self.tokens.append(token)

    def _list(self, api: str, plural: str, namespace: Optional[str], selector, limit: int, offset: int) -> dict:
        with self._cond:
            items = [o for (ns, _), o in sorted(self._objects.get((api, plural), {}).items())
                     if (namespace is None or ns == namespace) and _selected(o, selector)]
            version = str(self._version)
        page = items[offset:offset + limit] if limit else items[offset:]
        more = limit and offset + limit < len(items)
        meta = {"resourceVersion": version, **({"continue": str(offset + limit)} if more else {})}
        kind = self.kinds.get((api, plural), ("Object",))[0]
        return {"kind": kind + "List", "apiVersion": api, "metadata": meta, "items": page}

    def _discovery(self, api: str) -> dict:
        """The APIResourceList of one group/version, subresources included, as the API server lists them."""
        resources = []
        for (version, plural), (kind, namespaced) in sorted(self.kinds.items()):
            if version == api:
                resources += [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                               "verbs": ["get", "list", "watch"]},
                              {"name": f"{plural}/status", "singularName": "", "namespaced": namespaced, "kind": kind,
                               "verbs": ["get"]}]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api, "resources": resources}

    def _get(self, api: str, plural: str, namespace: str, name: str) -> Optional[dict]:
        with self._cond:
            return self._objects.get((api, plural), {}).get((namespace or "", name))

    def _watch_events(self, api: str, plural: str, namespace, selector, since: int, bookmarks: bool, seconds: float):
        """Yield event dicts after `since` until the watch ends; the first may be a 410 ERROR."""
        deadline = time.monotonic() + min(seconds, _MAX_WATCH_SECONDS)
        path = f"{api}/{plural}"
        with self._cond:
            if since < self._compacted - 1:
                yield {"type": "ERROR", "object": status_object(410, "Expired", f"too old resource version: {since}")}
                return
            generation = self._generation
        sent, last_bookmark = since, time.monotonic()
        while time.monotonic() < deadline:
            with self._cond:
                ended = self._stopped or self._generation != generation
                expired = ended and not self._stopped and self._compacted > sent and not self.gone_as_http
                pending = [] if ended else [e for e in self._events if e[0] > sent and e[1] == path]
                current = self._version
                if not ended and not pending:
                    self._cond.wait(0.2)  # then look again: the watch may have been ended meanwhile
            if expired:
                yield {"type": "ERROR", "object": status_object(410, "Expired", "too old resource version")}
            if ended:
                return
            for version, _, kind, obj in pending:
                sent = version
                if (namespace is None or obj["metadata"].get("namespace") == namespace) and _selected(obj, selector):
                    yield {"type": kind, "object": obj}
            if bookmarks and time.monotonic() - last_bookmark > _BOOKMARK_INTERVAL_SECONDS:
                last_bookmark, sent = time.monotonic(), max(sent, current)
                self.bookmarks_sent += 1
                self.bookmarks_sent_to[plural] = self.bookmarks_sent_to.get(plural, 0) + 1
                yield {"type": "BOOKMARK", "object": {"kind": self.kinds.get((api, plural), ("Object",))[0], "apiVersion": api,
                                                      "metadata": {"resourceVersion": str(sent)}}}


def _selected(obj: dict, selector: Optional[Tuple[str, str]]) -> bool:
    if selector is None:
        return True
    field, value = selector
    current = obj
    for part in field.split("."):
        current = current.get(part, {}) if isinstance(current, dict) else {}
    return current == value


def _parse_selector(text: str) -> Tuple[str, str]:
    match = re.fullmatch(r"(spec\.nodeName|spec\.driver|metadata\.name)==?([^,]*)", text)
    if not match:
        raise ValueError(f'"{text}" is not a known field selector')
    return match.group(1), match.group(2)


def _handler(api: FakeKubeApi):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: tests read the exporter's log, not ours
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            discovery = _DISCOVERY_PATH.fullmatch(url.path)
            if discovery:  # every authenticated user may read discovery (the system:discovery role)
                version = discovery.group("core") or f"{discovery.group('group')}/{discovery.group('version')}"
                api._record("discover", version, self.headers.get("Authorization"))
                if version not in api.served:
                    return self._send(404, status_object(404, "NotFound", "the server could not find the requested resource"))
                return self._send(200, api._discovery(version))
            match = _PATH.fullmatch(url.path)
            if not match:
                return self._send(404, status_object(404, "NotFound", f"the server could not find {url.path}"))
            version = match.group("core") or f"{match.group('group')}/{match.group('version')}"
            plural, name, namespace = match.group("plural"), match.group("name"), match.group("namespace")
            watching = query.get("watch") in ("1", "true")
            verb = "get" if name else "watch" if watching else "list"
            api._record(verb, plural, self.headers.get("Authorization"))
            if api.token is not None and self.headers.get("Authorization") != f"Bearer {api.token}":
                with api._cond:
                    api.unauthorized += 1
                return self._send(401, status_object(401, "Unauthorized", "Unauthorized"))
            if api.forbidden.get(plural) == verb:
                scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
                group = match.group("group") or ""
                what = (f"{plural}.{group}" if group else plural) + (f' "{name}"' if name else "")
                return self._send(403, status_object(403, "Forbidden", f'{what} is forbidden: User '
                                  f'"system:serviceaccount:gpu-monitoring:exporter" cannot {verb} resource '
                                  f'"{plural}" in API group "{group}" {scope}'))
            if version not in api.served:
                return self._send(404, status_object(404, "NotFound", "the server could not find the requested resource"))
            try:
                selector = _parse_selector(query["fieldSelector"]) if query.get("fieldSelector") else None
            except ValueError as exc:
                return self._send(400, status_object(400, "BadRequest", str(exc)))
            if api.ignore_field_selector:
                selector = None
            if name:
                obj = api._get(version, plural, namespace, name)
                if plural in api.hostile_gets:
                    return self._hostile_get(api.hostile_gets[plural], obj or {})
                if obj is None:
                    return self._send(404, status_object(404, "NotFound", f'{plural} "{name}" not found'))
                if "as=PartialObjectMetadata" in (self.headers.get("Accept") or ""):
                    with api._cond:
                        api.metadata_gets += 1
                    return self._send(200, {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                            "metadata": obj["metadata"]})
                return self._send(200, obj)
            if watching:
                return self._watch(version, plural, namespace, selector, query)
            limit, offset = int(query.get("limit", 0)), int(query.get("continue") or 0)
            return self._send(200, api._list(version, plural, namespace, selector, limit, offset))

        def _watch(self, version, plural, namespace, selector, query):
            since = int(query.get("resourceVersion") or 0)
            if api.watch_behaviour == "gone" or (api.gone_as_http and since and since < api._compacted - 1):
                return self._send(410, status_object(410, "Expired", f"too old resource version: {since}"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if api.watch_behaviour in ("stall", "end"):
                return self._hostile_watch(api.watch_behaviour)
            with api._cond:
                raw = api.raw_for_next_watch.pop(plural, None)
            if raw is not None:
                try:
                    for data in [raw] if isinstance(raw, bytes) else raw:
                        self._chunk(data)
                        api.raw_bytes_sent += len(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
            events = api._watch_events(version, plural, namespace, selector, since,
                                       query.get("allowWatchBookmarks") == "true" or api.bookmarks == "always",
                                       float(query.get("timeoutSeconds") or _MAX_WATCH_SECONDS))
            try:
                for event in events:
                    self._chunk(self._line_of(plural, event))
                self._chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        def _line_of(self, plural: str, event: dict) -> bytes:
            with api._cond:
                corrupt = api.corrupt_for_next_event.pop(plural, None) if event["type"] in (
                    "ADDED", "MODIFIED", "DELETED") else None
            return (json.dumps(event).encode() if corrupt is None else corrupt) + b"\n"

        def _hostile_watch(self, behaviour: str) -> None:
            """"stall": headers, then nothing until the client goes or the server stops; "end": no events."""
            self.close_connection = True
            if behaviour == "stall":
                deadline = time.monotonic() + _MAX_WATCH_SECONDS
                while api.watch_behaviour == "stall" and not api._stopped and time.monotonic() < deadline:
                    time.sleep(0.05)
            try:
                self._chunk(b"")
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _hostile_get(self, behaviour: str, obj: dict) -> None:
            self.close_connection = True
            padded = {**obj, "metadata": {**obj.get("metadata", {}), "annotations": {"padding": "x" * (5 << 20)}}}
            body = json.dumps(padded).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                if behaviour == "oversized":
                    self.wfile.write(body)
                    return
                deadline = time.monotonic() + _MAX_WATCH_SECONDS
                while not api._stopped and time.monotonic() < deadline:  # JSON may start with any whitespace
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _chunk(self, data: bytes) -> None:
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


def write_kubeconfig(path: str, server_url: str, token: Optional[str] = None, token_file: Optional[str] = None) -> str:
    """A kubeconfig (JSON is valid YAML) pointing at the fake server; `token_file` as a service account's."""
    user = {"token": token} if token else {"tokenFile": token_file} if token_file else {}
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server_url}}],
        "users": [{"name": "fake", "user": user}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }
    with open(path, "w") as handle:
        json.dump(config, handle)
    return path


def make_pod(namespace: str, name: str, node: str, labels=None, annotations=None, owner=None,
             containers=("main",), uid: Optional[str] = None, phase: str = "Running") -> dict:
    """A Pod object as the API server returns it (the fields the exporter reads, and those a client
    library requires); `owner` is (kind, name[, apiVersion[, controller]]) of its owner."""
    pod_uid = uid or str(uuid.uuid4())
    meta = {"name": name, "namespace": namespace, "uid": pod_uid, "labels": dict(labels or {}),
            "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(*owner)]
    statuses = [{"name": c, "image": "registry.example.com/app:1", "imageID": "", "ready": True, "restartCount": 0,
                 "containerID": f"containerd://{uuid.uuid5(uuid.NAMESPACE_OID, pod_uid + c).hex}"} for c in containers]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [{"name": c, "image": "registry.example.com/app:1"} for c in containers]},
            "status": {"phase": phase, "containerStatuses": statuses}}


def owner_reference(kind: str, name: str, api: Optional[str] = None, controller: bool = True) -> dict:
    """An ownerReference to (kind, name); the apiVersion of a well-known kind unless `api` says."""
    known = {kind: version for (version, _), (kind, _) in {**BUILT_IN_KINDS, **CUSTOM_KINDS}.items()}
    return {"apiVersion": api or known.get(kind, "example.com/v1"), "kind": kind, "name": name,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, kind + name)), "controller": controller,
            "blockOwnerDeletion": True}
