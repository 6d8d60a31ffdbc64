"""A pod's batch queue (--labels.extra queue): Kueue LocalQueue → ClusterQueue, a Volcano Queue or PodGroup,
a KAI Scheduler Queue.

The LocalQueue, PodGroup and KAI Queue objects are read with a GET each, remembered (bounded), on the
refresher; a scrape never calls the API. See docs/queues.md.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Optional, Tuple

from exporter.base.cache import RetryingCache
from exporter.base.logs import LogOnce
from exporter.collectors.kubernetes.labels import PodInfo, QueueHint
from exporter.collectors.kubernetes.watch import describe_failure
from exporter.collectors.kubernetes.workloads import READS_PER_REFRESH_SECONDS, NotServed, Workloads

# kind → the API versions it is read at, preferred first: Kueue v0.16 and later store v1beta2, and
# older installations serve v1beta1 only.
VERSIONS = {
    "LocalQueue": ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"),
    "PodGroup": ("scheduling.volcano.sh/v1beta1",),
    "Queue": ("scheduling.run.ai/v2",),  # KAI Scheduler's, cluster-scoped (discovery says so)
}
_RESOURCES = {"LocalQueue": "localqueues.kueue.x-k8s.io", "PodGroup": "podgroups.scheduling.volcano.sh",
              "Queue": "queues.scheduling.run.ai"}
MAX_OBJECTS = 4096  # queue objects remembered (answers and failed reads together)
RETRY_SECONDS = 60.0  # an object not found, or a read that failed: asked again after this long
# A kind whose CRD is not installed, or that RBAC refuses: not read again for this long, so that a
# cluster without Kueue, Volcano or KAI costs one discovery read per kind every ten minutes, not a read per pod.
UNAVAILABLE_SECONDS = 600.0

QueuePair = Tuple[str, str]  # (cluster_queue, local_queue)
ReadObject = Callable[[str, str, str, str], dict]  # (apiVersion, kind, namespace, name) → the whole object
_NO_QUEUE: QueuePair = ("", "")


class _Refused(Exception):
    """The object cannot be had (not found, its CRD missing, forbidden): the pod's queue labels are empty."""


class QueueObjects:
    """(kind, namespace, name) → the queue it names: a LocalQueue's clusterQueue, a PodGroup's queue, a KAI
    Queue's own name (namespace "": it is cluster-scoped).

    `queue_of` answers the name, "" when the object cannot be had (not found: asked again after
    RETRY_SECONDS; CRD not installed or 403: the kind is not read for UNAVAILABLE_SECONDS, logged once),
    or None while it is unknown for now (the API unreachable, this refresh's reads spent).
    """

    def __init__(self, read_object: ReadObject, clock: Callable[[], float] = time.monotonic):
        self._read_object = read_object
        self._clock = clock
        self._cache: RetryingCache = RetryingCache(self._lookup, RETRY_SECONDS, MAX_OBJECTS, clock)
        self._lock = threading.Lock()
        self._refused: Dict[tuple, bool] = {}  # keys whose last read was refused; oldest first
        self._unavailable_until: Dict[str, float] = {}  # kind → when it is read again
        self._version: Dict[str, str] = {}  # kind → the API version found served
        self._logged = LogOnce()
        self._read_until: Optional[float] = None

    def begin_refresh(self) -> None:
        """Reads of objects not remembered stop READS_PER_REFRESH_SECONDS from now (as the owner reads do)."""
        self._read_until = self._clock() + READS_PER_REFRESH_SECONDS

    @property
    def lookups(self) -> int:
        return self._cache.lookups

    def queue_of(self, kind: str, namespace: str, name: str) -> Optional[str]:
        key = (kind, namespace, name)
        with self._lock:
            if self._clock() < self._unavailable_until.get(kind, 0.0):
                return ""
        if self._read_until is not None and self._clock() >= self._read_until and self._cache.would_look_up(key):
            return None
        answer = self._cache.get(key)
        if answer is not None:
            return answer
        with self._lock:
            return "" if key in self._refused else None

    def _lookup(self, key: tuple) -> Optional[str]:
        kind, namespace, name = key
        try:
            obj = self._read(kind, namespace, name)
        except _Refused:
            self._remember_refused(key)
            return None
        except Exception as exc:  # noqa: BLE001 - logged once per kind and reason; retried after a minute
            reason, message = describe_failure(exc, "get", _RESOURCES[kind])
            self._logged.log((kind, reason), "warn", "queue labels unknown while " + message.splitlines()[0],
                             dependency="kubernetes-api", object=f"{namespace}/{name}")
            return None
        with self._lock:
            self._refused.pop(key, None)
        return name if kind == "Queue" else _spec_queue(kind, obj)

    def _read(self, kind: str, namespace: str, name: str) -> dict:
        """The object, at the first of its API versions that is served; _Refused when it cannot be had."""
        with self._lock:
            known = self._version.get(kind)
        for version in (known,) if known else VERSIONS[kind]:
            try:
                obj = self._read_object(version, kind, namespace, name)
            except NotServed:
                continue
            except Exception as exc:
                self._refuse_if(kind, version, exc)
                raise
            with self._lock:
                self._version[kind] = version
            return obj
        with self._lock:
            self._version.pop(kind, None)  # the CRD was removed, or another version is served now
        self._unavailable(kind, "not_served", f"{_RESOURCES[kind]} is not served (its CRD is not installed)")
        raise _Refused(kind)

    def _refuse_if(self, kind: str, version: str, exc: Exception) -> None:
        """Raise _Refused for an answer that says the object cannot be had; return for any other failure.
        Discovery listed the kind at `version` (else NotServed came), so a 404 is the object's own."""
        reason, _ = describe_failure(exc, "get", _RESOURCES[kind])
        if reason == "not_found":
            with self._lock:
                self._version[kind] = version
            raise _Refused(kind) from None  # a LocalQueue not created yet, a PodGroup deleted
        if reason == "forbidden":
            plural, group = _RESOURCES[kind].split(".", 1)
            self._unavailable(kind, "forbidden", f"cannot read {_RESOURCES[kind]} (403): the ClusterRole needs "
                              f"verb 'get' on '{plural}' in API group '{group}' (the chart's ClusterRole: docs/kubernetes.md#rbac)")
            raise _Refused(kind) from None

    def _unavailable(self, kind: str, reason: str, message: str) -> None:
        with self._lock:
            self._unavailable_until[kind] = self._clock() + UNAVAILABLE_SECONDS
        self._logged.log((kind, reason), "warn" if reason == "forbidden" else "info",
                         f"queue labels: {message}; pods queued through it get empty cluster_queue and local_queue",
                         dependency="kubernetes-api", retry_seconds=UNAVAILABLE_SECONDS)

    def _remember_refused(self, key: tuple) -> None:
        with self._lock:
            self._refused.pop(key, None)
            while len(self._refused) >= MAX_OBJECTS:
                del self._refused[next(iter(self._refused))]
            self._refused[key] = True


def _spec_queue(kind: str, obj: dict) -> str:
    """A LocalQueue's spec.clusterQueue, or a PodGroup's spec.queue (Volcano's default queue when unset)."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    value = spec.get("clusterQueue" if kind == "LocalQueue" else "queue")
    if isinstance(value, str) and value:
        return value
    return "" if kind == "LocalQueue" else "default"


class QueueLabels:
    """A pod → (cluster_queue, local_queue): from its own metadata, else its owners' (Kueue puts its label
    only on a Job's or JobSet's object), then the LocalQueue, KAI Queue or PodGroup it names. None while unknown."""

    def __init__(self, objects: QueueObjects, workloads: Workloads):
        self._objects = objects
        self._workloads = workloads

    def begin_refresh(self) -> None:
        self._objects.begin_refresh()

    def of(self, namespace: str, info: PodInfo) -> Optional[QueuePair]:
        hint = info.queue or QueueHint()
        kai_queue = hint.kai_queue
        if not hint.local_queue:
            # Kueue's label on an owner outranks Volcano's names on the pod: Volcano annotates every pod it
            # schedules with its PodGroup, Kueue's queue included.
            owners = self._workloads.owners_kept(namespace, info.controller)
            if owners is None:
                return None  # an owner not read yet: the next refresh asks again
            # KAI reads its label on the top owner first, then on the pod (no owner in between).
            top = owners[-1] if owners and isinstance(owners[-1], QueueHint) else QueueHint()
            kai_queue = top.kai_queue or kai_queue
            hint = next((kept for kept in owners if isinstance(kept, QueueHint) and kept.local_queue), hint)
        if hint.local_queue:
            cluster_queue = self._objects.queue_of("LocalQueue", namespace, hint.local_queue)
            if cluster_queue is None:
                return None
            return (cluster_queue, hint.local_queue) if cluster_queue else _NO_QUEUE
        if kai_queue:
            queue = self._objects.queue_of("Queue", "", kai_queue)
            return None if queue is None else (queue, "")
        if hint.volcano_queue:
            return (hint.volcano_queue, "")
        if hint.pod_group:
            queue = self._objects.queue_of("PodGroup", namespace, hint.pod_group)
            return None if queue is None else (queue, "")
        return _NO_QUEUE
