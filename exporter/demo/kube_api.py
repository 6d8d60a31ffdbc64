"""A Kubernetes API server on loopback speaking the real REST + watch protocol: the demo's, and the core of the tests' fake.

Lists are JSON with metadata.resourceVersion (paged with limit/continue); `?watch=1` streams
newline-delimited events (ADDED, MODIFIED, DELETED, BOOKMARK) over chunked HTTP/1.1; `fieldSelector=
spec.nodeName=X` filters. Discovery (`/api/v1`, `/apis/<group>/<version>`) lists the kinds served, and
`/apis` the groups (as an aggregated APIGroupDiscoveryList, every version's kinds, when asked for one);
a group/version not served, or a kind it does not list, answers 404, as on a cluster without it. A get with
`Accept: …;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` is answered with the metadata alone.

`_answer_watch` is told of every watch before its first event (the demo learns so that the exporter
watches its pods); `handler` is the request handler class (kube_api_http.KubeApiHandler).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

from exporter.demo.kube_api_http import MAX_WATCH_SECONDS, KubeApiHandler, handler_class
from exporter.demo.kube_objects import BUILT_IN_KINDS, owner_reference
from exporter.demo.loopback_server import OpenConnections, QuietServer

BOOKMARK_INTERVAL_SECONDS = 1.0


class FakeKubeApi:
    """Objects by (api version path, plural) → {(namespace, name): object}; one resourceVersion counter."""

    handler = KubeApiHandler

    def __init__(self, served_versions=("v1", "apps/v1", "batch/v1", "resource.k8s.io/v1")):
        self.served = set(served_versions)
        self.kinds = dict(BUILT_IN_KINDS)
        self.aggregated_discovery = True  # False: `/apis` answers a plain APIGroupList, as before Kubernetes 1.26
        self._cond = threading.Condition()
        self._objects: Dict[Tuple[str, str], Dict[Tuple[str, str], dict]] = {}
        self._events: List[Tuple[int, str, str, dict]] = []  # (rv, group path + plural, type, object)
        self._version = 1
        self._generation = 0  # bumped to end every open watch
        self._server: Optional[ThreadingHTTPServer] = None
        self._stopped = False
        self.connections = OpenConnections()  # the handlers' (KubeApiHandler.setup, finish)

    # --- the owner's side ------------------------------------------------------------------------
    def start(self, port: int = 0) -> "FakeKubeApi":
        """Serve on loopback; a stopped server can be started again on its old port (`port`)."""
        server = QuietServer(("127.0.0.1", port), handler_class(self, self.handler))
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
            self.connections.shut_all()  # kept alive between requests: a stopped server answers none

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

    def put_owner(self, api: str, plural: str, namespace: str, name: str, owner=None, controller: bool = True,
                  labels: Optional[dict] = None) -> dict:
        """An object of any kind (a ReplicaSet, a Rollout, a leader Pod…) with `owner` (apiVersion, kind,
        name) as its ownerReference; a spec of some size, as real ones have, that a metadata read skips.
        `labels` go on the object and on its pod template (app=<name> when not given)."""
        kind, namespaced = self.kinds[(api, plural)]
        meta = {"name": name, **({"namespace": namespace} if namespaced else {}), **({"labels": dict(labels)} if labels else {})}
        if owner is not None:
            meta["ownerReferences"] = [owner_reference(*owner, controller=controller)]
        return self.put(api, plural, {"apiVersion": api, "kind": kind, "metadata": meta,
                                      "spec": {"selector": {"matchLabels": {"app": name}},
                                               "template": {"metadata": {"labels": dict(labels or {"app": name})},
                                                            "spec": {"containers": [{"name": "main"}] * 20}}}})

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

    def close_watches(self) -> None:
        """End every open watch cleanly, as an API server does when timeoutSeconds runs out."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def _answer_watch(self, handler, plural: str, since: int) -> bool:
        """Told of a watch before its first event (headers sent when `handler.headers_sent`); True: answered."""
        return False

    # --- the server's side -----------------------------------------------------------------------
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

    def _group_versions(self) -> Dict[str, List[str]]:
        """Each group served (the core group aside: it is `/api`'s) → its versions, preferred first."""
        groups: Dict[str, List[str]] = {}
        for api in sorted(self.served, key=_version_rank):
            if "/" in api:
                group, version = api.split("/", 1)
                groups.setdefault(group, []).append(version)
        return groups

    def _group_list(self) -> dict:
        """`/apis` as an APIGroupList: the groups and their versions, without their kinds."""
        groups = [{"name": group, "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                   "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]}}
                  for group, versions in sorted(self._group_versions().items())]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _aggregated_discovery(self) -> dict:
        """`/apis` as an APIGroupDiscoveryList (apidiscovery.k8s.io/v2): every group, version and kind served."""
        items = []
        for group, versions in sorted(self._group_versions().items()):
            served = []
            for version in versions:
                api = f"{group}/{version}"
                resources = [{"resource": plural, "responseKind": {"group": group, "version": version, "kind": kind},
                              "scope": "Namespaced" if namespaced else "Cluster", "singularResource": kind.lower(),
                              "verbs": ["get", "list", "watch"],
                              "subresources": [{"subresource": "status", "verbs": ["get"],
                                                "responseKind": {"group": group, "version": version, "kind": kind}}]}
                             for (served_api, plural), (kind, namespaced) in sorted(self.kinds.items())
                             if served_api == api]
                served.append({"version": version, "resources": resources, "freshness": "Current"})
            items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": served})
        return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}

    def _get(self, api: str, plural: str, namespace: str, name: str) -> Optional[dict]:
        with self._cond:
            return self._objects.get((api, plural), {}).get((namespace or "", name))

    def _watch_events(self, api: str, plural: str, namespace, selector, since: int, bookmarks: bool, seconds: float):
        """Event dicts after `since` until the watch ends (or every open watch is ended)."""
        with self._cond:
            generation = self._generation
        return self._events_after(generation, api, plural, namespace, selector, since, bookmarks, seconds)

    def _events_after(self, generation: int, api: str, plural: str, namespace, selector, since: int,
                      bookmarks: bool, seconds: float):
        """Yield event dicts after `since` until the watch ends or the watches' `generation` does."""
        deadline = time.monotonic() + min(seconds, MAX_WATCH_SECONDS)
        path = f"{api}/{plural}"
        sent, last_bookmark = since, time.monotonic()
        while time.monotonic() < deadline:
            with self._cond:
                ended = self._stopped or self._generation != generation
                pending = [] if ended else [e for e in self._events if e[0] > sent and e[1] == path]
                current = self._version
                if not ended and not pending:
                    self._cond.wait(0.2)  # then look again: the watch may have been ended meanwhile
            if ended:
                return
            for version, _, kind, obj in pending:
                sent = version
                if (namespace is None or obj["metadata"].get("namespace") == namespace) and _selected(obj, selector):
                    yield {"type": kind, "object": obj}
            if bookmarks and time.monotonic() - last_bookmark > BOOKMARK_INTERVAL_SECONDS:
                last_bookmark, sent = time.monotonic(), max(sent, current)
                yield {"type": "BOOKMARK", "object": {"kind": self.kinds.get((api, plural), ("Object",))[0], "apiVersion": api,
                                                      "metadata": {"resourceVersion": str(sent)}}}


def _version_rank(api: str) -> tuple:
    """Sort key of a group/version, Kubernetes' preference first: GA, then beta, then alpha, newer first."""
    version = api.rpartition("/")[2]
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[match.group(2)]
    return (stage, -int(match.group(1)), -int(match.group(3) or 0), version)


def _selected(obj: dict, selector: Optional[Tuple[str, str]]) -> bool:
    if selector is None:
        return True
    field, value = selector
    current = obj
    for part in field.split("."):
        current = current.get(part, {}) if isinstance(current, dict) else {}
    return current == value

