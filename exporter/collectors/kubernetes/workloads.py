"""A pod's workload: its top controller, found by walking `controller: true` ownerReferences up, any kind.

Each object on the way is read once, metadata only, and its controller remembered (a bounded
RetryingCache), so a refresh walks a chain of cached answers and a scrape never calls the API.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from exporter.base.cache import RetryingCache
from exporter.base.logs import LogOnce
from exporter.collectors.kubernetes.stream import ANSWER_SECONDS, http_client, read_answer
from exporter.collectors.kubernetes.watch import describe_failure

# A real chain is at most four levels above the pod (LeaderWorkerSet worker: StatefulSet → leader
# Pod → StatefulSet → LeaderWorkerSet); the bound only stops a cycle or a runaway operator chain.
MAX_DEPTH = 8
MAX_OBJECTS = 4096  # owners remembered (answers and failed reads together)
# Owner reads made in one mapping refresh stop once this long has gone on them: an API server that
# answers slowly (or not at all, each read waiting out its bound) must not hold every GPU's attribution
# for a read per new pod. The pods left are walked at the next refresh.
READS_PER_REFRESH_SECONDS = 5.0
RETRY_SECONDS = 60.0
# A group/version's discovery is read again when it lacks a kind asked for (a CRD installed later),
# at most this often: an owner of a kind never served must not cost a discovery read per walk.
REDISCOVER_SECONDS = 60.0
_MAX_GROUP_VERSIONS = 256
# What the API server sends instead of the whole object: name, namespace, uid, labels, annotations,
# ownerReferences. A ReplicaSet's pod template or a JobSet's spec can be tens of kilobytes.
METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class OwnerRef(NamedTuple):
    """The controlling ownerReference of an object: its owner's apiVersion, kind and name."""

    api_version: str
    kind: str
    name: str


_TOP = OwnerRef("", "", "")  # the remembered parent of an object that has no controller


class Level(NamedTuple):
    """What is remembered of one owner object: its controller (or _TOP), and what `keep` kept of its metadata."""

    parent: OwnerRef
    kept: object = None


def controller_of(references: Iterable) -> Optional[OwnerRef]:
    """The `controller: true` entry of ownerReferences (dicts, or lightkube models), if any.

    A metadata read is untyped JSON: an entry whose apiVersion, kind or name is not a non-empty string
    (or whose name holds a '/', which would change the path read next) names no object, and is taken
    as no controller: its values would otherwise become label values, or a list read of a collection.
    """
    for ref in references or ():
        get = ref.get if isinstance(ref, dict) else (lambda field, r=ref: getattr(r, field, None))
        if get("controller") is True:
            fields = (get("apiVersion"), get("kind"), get("name"))
            if not all(isinstance(field, str) and field for field in fields) or "/" in fields[2]:
                return None
            return OwnerRef(*fields)
    return None


class NotServed(Exception):
    """The API server serves no resource of this kind in this group/version (a CRD removed, a typo)."""

    status_code = 404


class MetadataReader:
    """Reads one object's ownerReferences by apiVersion and kind, with a metadata-only GET.

    The resource's plural and scope come from discovery (`/api/v1`, `/apis/<group>/<version>`), read
    once per group/version and again (at most every REDISCOVER_SECONDS) when a kind is missing:
    guessing plurals from kinds goes wrong (`NetworkPolicy` → `networkpolicies`) and a
    cluster-scoped owner has no namespace in its path. Discovery needs no RBAC of ours (every
    authenticated user may read it); each kind needs `get` on its resource.
    """

    def __init__(self, client, read_seconds: float = ANSWER_SECONDS, clock: Callable[[], float] = time.monotonic):
        # The lightkube client's own connection: the same server, TLS, 10 s timeout and credentials,
        # the rotating token included; lightkube itself offers no way to ask for a PartialObjectMetadata
        # answer.
        self._http = http_client(client)
        self._resources: Dict[str, Dict[str, Tuple[str, bool]]] = {}  # group/version → kind → (plural, namespaced)
        self._read_at: Dict[str, float] = {}  # group/version → when its discovery was read
        self._clock = clock
        self._lock = threading.Lock()
        self._read_seconds = read_seconds

    def plural(self, api_version: str, kind: str, read: bool = True) -> Tuple[str, bool]:
        """(plural, namespaced) of a kind; raises NotServed when discovery does not list it. Without
        `read`, only from a discovery answer already read (KeyError if none): for messages."""
        with self._lock:
            kinds = self._resources.get(api_version)
            read_at = self._read_at.get(api_version, 0.0)
        if kinds is None and not read:
            raise KeyError(api_version)
        stale = kinds is not None and kind not in kinds and self._clock() - read_at >= REDISCOVER_SECONDS
        if read and (kinds is None or stale):
            body = self._discovery(api_version)
            kinds = {item["kind"]: (item["name"], bool(item.get("namespaced")))
                     for item in body.get("resources", ()) if "/" not in item.get("name", "/")}
            with self._lock:
                if len(self._resources) >= _MAX_GROUP_VERSIONS:
                    self._resources.clear()
                    self._read_at.clear()
                self._resources[api_version] = kinds
                self._read_at[api_version] = self._clock()
        if kind not in kinds:
            raise NotServed(f"{api_version} serves no kind {kind}")
        return kinds[kind]

    def _discovery(self, api_version: str) -> dict:
        """The group/version's APIResourceList; NotServed when the API server has no such group/version."""
        try:
            return self._get(_group_path(api_version))
        except Exception as exc:
            if getattr(getattr(exc, "status", None), "code", None) == 404:
                raise NotServed(f"{api_version} is not served") from None
            raise

    def owner_references(self, api_version: str, kind: str, namespace: str, name: str) -> List[dict]:
        return list(self.metadata(api_version, kind, namespace, name).get("ownerReferences") or ())

    def metadata(self, api_version: str, kind: str, namespace: str, name: str) -> dict:
        """One object's metadata (a metadata-only read): ownerReferences, labels, annotations."""
        metadata = self.read(api_version, kind, namespace, name, METADATA_ACCEPT).get("metadata")
        return metadata if isinstance(metadata, dict) else {}

    def read(self, api_version: str, kind: str, namespace: str, name: str, accept: str = "application/json") -> dict:
        """One object as JSON (the whole of it unless `accept` asks for less)."""
        plural, namespaced = self.plural(api_version, kind)
        scope = f"/namespaces/{namespace}" if namespaced else ""
        body = self._get(f"{_group_path(api_version)}{scope}/{plural}/{name}", accept)
        return body if isinstance(body, dict) else {}

    def _get(self, path: str, accept: str = "application/json") -> dict:
        """The JSON answer, bounded in size and time (stream.read_answer): these reads run on the refresher."""
        return json.loads(read_answer(self._http, path, accept, self._read_seconds))


def _group_path(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def resource_label(api_version: str, kind: str) -> Tuple[str, str]:
    """(API group, a guessed plural) of a kind: for messages only, where discovery cannot say."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return group, kind.lower() + "s"


# (apiVersion, kind, namespace, name) of one owner object.
Key = Tuple[str, str, str, str]
ReadOwners = Callable[[str, str, str, str], object]  # ownerReferences (a list), or the whole metadata (a dict)
ResourceOf = Callable[[str, str], str]


class Workloads:
    """Pod → (kind, name) of its top controller; see docs/kubernetes.md, "Workload: the top controller".

    `read_owners(api_version, kind, namespace, name)` returns an object's ownerReferences (or its whole
    metadata, when `keep` is to remember something of it) or raises as the client does. A level that answers 403 or 404 ends the walk there: the workload is that
    object, known by name from the level below; it is asked again after RETRY_SECONDS (the RBAC may
    have been granted). Any other failure (unreachable, 5xx) leaves the workload unknown for as long.
    """

    def __init__(self, read_owners: ReadOwners, clock: Callable[[], float] = time.monotonic,
                 resource_of: Optional[ResourceOf] = None, keep: Optional[Callable[[dict], object]] = None):
        self._read_owners = read_owners
        self._resource_of = resource_of
        self._keep = keep  # what is remembered of each owner's metadata besides its controller (owners_kept)
        self._parents: RetryingCache[Key, Level] = RetryingCache(self._lookup, RETRY_SECONDS, MAX_OBJECTS, clock)
        self._unreadable: Dict[Key, bool] = {}  # keys whose last read was refused (403/404); oldest first
        self._lock = threading.Lock()
        # Once per (resource, reason): a CronJob's every Job refused must not log a line each. The kinds in keys
        # come from ownerReferences, which anyone may write: at most _MAX_GROUP_VERSIONS keys are logged.
        self._logged = LogOnce(most=_MAX_GROUP_VERSIONS)
        self._clock = clock
        self._read_until: Optional[float] = None  # see begin_refresh

    def begin_refresh(self) -> None:
        """Start one refresh's walks: reads of owners not remembered stop READS_PER_REFRESH_SECONDS from now."""
        self._read_until = self._clock() + READS_PER_REFRESH_SECONDS

    @property
    def lookups(self) -> int:
        """Owner objects read (cache misses and retries), for tests and debugging."""
        return self._parents.lookups

    def __len__(self) -> int:
        return len(self._parents)

    def of(self, namespace: str, pod_name: str, controller: Optional[OwnerRef]) -> Optional[Tuple[str, str]]:
        """The workload of a pod with this controller; None while a level cannot be read for now."""
        if controller is None:
            return ("Pod", pod_name)
        return self._walk(namespace, controller)[0]

    def owners_kept(self, namespace: str, controller: Optional[OwnerRef]) -> Optional[List[object]]:
        """What `keep` kept of each owner on the pod's chain, its controller first (the same reads as `of`,
        cached alike); None while a level cannot be read for now."""
        if controller is None:
            return []
        workload, kept = self._walk(namespace, controller)
        return None if workload is None else kept

    def _walk(self, namespace: str, controller: OwnerRef) -> Tuple[Optional[Tuple[str, str]], List[object]]:
        """(the workload, or None while a level cannot be read for now; what was kept of each level read)."""
        ref, seen, kept = controller, set(), []
        for _ in range(MAX_DEPTH):
            key = (ref.api_version, ref.kind, namespace, ref.name)
            if key in seen:
                break  # a cycle: no real controller makes one, but a hand-edited object can
            seen.add(key)
            spent = (self._read_until is not None and self._clock() >= self._read_until
                     and self._parents.would_look_up(key))  # this refresh's reads are spent: a later one reads it
            level = None if spent else self._parents.get(key)
            if level is None:
                with self._lock:
                    return ((ref.kind, ref.name) if key in self._unreadable else None), kept
            kept.append(level.kept)
            if level.parent is _TOP:
                return (ref.kind, ref.name), kept
            ref = level.parent
        self._log_once(("depth", ref.kind), "info", "ownerReferences go deeper than the walk follows (or in a cycle): "
                       "the workload is the last owner reached", kind=ref.kind, name=ref.name, max_depth=MAX_DEPTH)
        return (ref.kind, ref.name), kept

    def _lookup(self, key: Key) -> Optional[Level]:
        api_version, kind, namespace, name = key
        try:
            answer = self._read_owners(api_version, kind, namespace, name)
        except Exception as exc:  # noqa: BLE001 - logged once per resource and reason; retried after a minute
            self._failed(key, exc)
            return None
        with self._lock:
            self._unreadable.pop(key, None)
        metadata = answer if isinstance(answer, dict) else {"ownerReferences": answer}
        kept = self._keep(metadata) if self._keep is not None else None
        return Level(controller_of(metadata.get("ownerReferences")) or _TOP, kept)

    def _failed(self, key: Key, exc: Exception) -> None:
        api_version, kind, namespace, name = key
        group, plural = resource_label(api_version, kind)
        if self._resource_of is not None:
            try:
                plural = self._resource_of(api_version, kind)
            except Exception:  # noqa: BLE001 - the guessed plural still names it well enough in a message
                pass
        resource = f"{plural}.{group}" if group else plural
        reason, message = ("not_found", "") if isinstance(exc, NotServed) else describe_failure(exc, "get", resource)
        refused = reason in ("forbidden", "not_found")
        if refused:
            with self._lock:
                self._unreadable.pop(key, None)
                while len(self._unreadable) >= MAX_OBJECTS:
                    del self._unreadable[next(iter(self._unreadable))]
                self._unreadable[key] = True
        if reason == "forbidden":
            message = (f"workload: cannot read {kind} objects (403), so a workload stops at its {kind}: the ClusterRole "
                       f"needs verb 'get' on '{plural}' in API group '{group}' (the chart's ClusterRole: docs/kubernetes.md#rbac)")
        elif refused:
            message = (f"workload: a {kind} was not found, or {api_version} is not served (404): a workload "
                       f"stops at that {kind}")
        else:  # the client's text can run over several lines: the first says it
            message = f"workload unknown while {kind} objects cannot be read: {message.splitlines()[0]}"
        self._log_once((resource, reason), "warn" if reason != "not_found" else "info", message,
                       object=f"{namespace}/{name}")

    def _log_once(self, what: tuple, level: str, message: str, **fields) -> None:
        self._logged.log(what, level, message, dependency="kubernetes-api", **fields)
