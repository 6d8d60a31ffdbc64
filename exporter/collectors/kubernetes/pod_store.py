"""This node's pods as the pod watch last told them, and the names of those it saw deleted; the watch's store."""

from __future__ import annotations

import threading
from typing import Dict, Iterable, Optional, Set, Tuple

from exporter.base.logs import LogOnce
from exporter.core import hami
from exporter.core.health import ResourceHealth
from exporter.collectors.kubernetes.extended_resources import extended_resource_claim
from exporter.collectors.kubernetes.labels import LabelSpec, PodInfo, allowed_items
from exporter.collectors.kubernetes.queue_hints import queue_hint
from exporter.collectors.kubernetes.workloads import controller_of

MAX_PODS = 20_000  # far above any node's pod limit (110 by default); bounds memory if a selector is wrong
_MAX_GONE = 4096  # deleted pods remembered, in case the kubelet keeps reporting their devices
_ENDED_PHASES = ("Succeeded", "Failed")  # terminal: the pod's containers have all stopped for good

PodKey = Tuple[str, str]  # (namespace, name)


def pod_info(pod, spec: LabelSpec) -> PodInfo:
    """The few fields kept of a Pod model."""
    meta = pod.metadata
    status = pod.status
    statuses = [] if status is None else (status.initContainerStatuses or []) + (status.containerStatuses or [])
    return PodInfo(
        uid=meta.uid or "",
        labels=allowed_items(meta.labels, spec.pod_labels),
        annotations=allowed_items(meta.annotations, spec.pod_annotations),
        controller=controller_of(meta.ownerReferences),
        containers=tuple((s.name, s.containerID) for s in statuses if s.containerID),
        ended=status is not None and status.phase in _ENDED_PHASES,
        queue=queue_hint(meta.labels, meta.annotations) if spec.queue else None,
        resource_health=_resource_health(status.containerStatuses or () if status is not None else ()),
        extended_claim=extended_resource_claim(status),
        **_hami_fields(meta.annotations, pod.spec),
    )


def _hami_fields(annotations, spec) -> dict:
    """PodInfo's `hami` (and `hami_error` when its annotation cannot be read) of a pod HAMi bound."""
    if not annotations or hami.ALLOCATED_ANNOTATION not in annotations:
        return {}
    init = [c.name for c in (spec.initContainers or ())] if spec is not None else []
    containers = [c.name for c in (spec.containers or ())] if spec is not None else []
    try:
        given = hami.assignment(annotations, init, containers)
    except hami.MalformedAnnotation as exc:
        return {"hami_error": str(exc)}
    return {"hami": tuple(sorted(given.items()))} if given else {}


def _resource_health(statuses) -> tuple:
    """Each container's allocatedResourcesStatus entries; only containerStatuses carry them (KEP-4680)."""
    # getattr: lightkube-models older than Kubernetes 1.31 have no such field (pyproject floors only
    # lightkube), and a pod must still be read without it; an entry without health is read as unknown.
    return tuple(ResourceHealth(s.name, entry.name, resource.resourceID, getattr(resource, "health", None) or "")
                 for s in statuses for entry in getattr(s, "allocatedResourcesStatus", None) or ()
                 for resource in entry.resources or ())


def _key(pod) -> PodKey:
    return pod.metadata.namespace, pod.metadata.name


class PodStore:
    """(namespace, name) → PodInfo of this node's pods, kept by the pod ListWatch (watch.WatchedStore), read by
    the mapping refresher and the per-process shares. Any thread may call any method.

    A deleted pod's name is remembered (the newest _MAX_GONE) because the kubelet can go on reporting its
    devices for a while: such a pod holds none.
    """

    def __init__(self, spec: LabelSpec, node_name: str):
        self._spec = spec
        self._node_name = node_name  # for the log line only
        self._lock = threading.Lock()
        self._pods: Dict[PodKey, PodInfo] = {}
        self._gone: Dict[PodKey, bool] = {}  # oldest first
        self._full_logged = LogOnce()
        self._malformed_logged = LogOnce(most=_MAX_GONE)  # pods whose HAMi annotation cannot be read
        self.malformed_annotations = 0  # pod versions whose HAMi annotation could not be read

    # Fed by the pod ListWatch.
    def replace(self, pods: list, complete: bool) -> None:
        """A full list replaces the cache in one step. A pod missing from a `complete` list was deleted while the
        watch was away. A list that skipped an object cannot tell a deleted pod from one it could not read: a pod
        then missing is dropped, not taken as ended (which would take its GPU from it)."""
        fresh = {_key(pod): pod_info(pod, self._spec) for pod in pods[:MAX_PODS]}
        if len(pods) > MAX_PODS:
            self._log_full(len(pods))
        listed = {_key(pod) for pod in pods}
        for key, info in fresh.items():
            self._note_malformed(key, info)
        with self._lock:
            if complete:
                for key in self._pods.keys() - listed:
                    self._remember_gone(key)
            for key in fresh.keys() & self._gone.keys():
                del self._gone[key]
            self._pods = fresh

    def add(self, pod) -> None:
        key, info = _key(pod), pod_info(pod, self._spec)
        self._note_malformed(key, info)
        with self._lock:
            self._gone.pop(key, None)  # a StatefulSet's pod comes back under its old name
            if key in self._pods or len(self._pods) < MAX_PODS:
                self._pods[key] = info
                return
        self._log_full(MAX_PODS + 1)

    update = add  # a modified pod is kept as the watch last told it

    def delete(self, pod) -> None:
        key = _key(pod)
        with self._lock:
            self._pods.pop(key, None)
            self._remember_gone(key)

    # Read by the refresher and the per-process shares.
    def get(self, key: PodKey) -> Optional[PodInfo]:
        with self._lock:
            return self._pods.get(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def copy(self) -> Dict[PodKey, PodInfo]:
        with self._lock:
            return dict(self._pods)

    def ended_among(self, pods: Iterable[PodKey]) -> Set[PodKey]:
        """Those of `pods` that were deleted, or whose phase is Succeeded or Failed."""
        with self._lock:
            return {pod for pod in pods if pod in self._gone or self._has_ended(pod)}

    def _has_ended(self, key: PodKey) -> bool:
        info = self._pods.get(key)
        return info is not None and info.ended

    def _remember_gone(self, key: PodKey) -> None:
        """Remember a deleted pod's name, newest last (lock held)."""
        self._gone.pop(key, None)
        while len(self._gone) >= _MAX_GONE:
            del self._gone[next(iter(self._gone))]
        self._gone[key] = True

    def _note_malformed(self, key: PodKey, info: PodInfo) -> None:
        """Count a HAMi annotation that cannot be read, once per pod and value (not on every update of the
        pod), and log it once per pod: its devices are then attributed by the kubelet's IDs alone."""
        with self._lock:
            previous = self._pods.get(key)
            if not info.hami_error or (previous is not None and previous.hami_error == info.hami_error):
                return
            self.malformed_annotations += 1
        self._malformed_logged.log(key, "warn", "a pod's HAMi annotation cannot be read: its GPUs are attributed by "
                                   "the kubelet's device IDs, which may name another GPU", namespace=key[0], pod=key[1],
                                   annotation=hami.ALLOCATED_ANNOTATION, error=info.hami_error)

    def _log_full(self, count: int) -> None:
        self._full_logged.log("full", "warn", "more pods on this node than the cache holds; the rest get no extra labels",
                              pods=count, max_pods=MAX_PODS, node=self._node_name)
