"""The Kubernetes source composed: two watches feeding a pod store and the DRA devices, and what reads them.

Everything here runs on background threads or the mapping refresher; a scrape never calls the API.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Iterable, List, Optional, Set

from exporter.core.mapping import DraResolution
from exporter.sources.kubernetes.dra import DraDevices, read_claim
from exporter.sources.kubernetes.extra_labels import ExtraLabels
from exporter.sources.kubernetes.freshness import Freshness
from exporter.sources.kubernetes.labels import LabelSpec, PodInfo
from exporter.sources.kubernetes.objects import pod_check, slice_check
from exporter.sources.kubernetes.pod_store import PodKey, PodStore
from exporter.sources.kubernetes.queue_hints import metadata_queue_hint
from exporter.sources.kubernetes.queues import QueueLabels, QueueObjects
from exporter.sources.kubernetes.status import KubernetesStatus
from exporter.sources.kubernetes.stream import ANSWER_SECONDS, http_client
from exporter.sources.kubernetes.watch import WATCH_SILENCE_SECONDS, ListWatch
from exporter.sources.kubernetes.workloads import MetadataReader, Workloads


def _slice_v1beta1():
    # Kubernetes 1.32-1.33 serve DRA as v1beta1 only; imported only there (each API version's models cost RSS).
    from lightkube.resources.resource_v1beta1 import ResourceSlice

    return ResourceSlice


class KubernetesContext:
    """This node's pods and DRA devices, kept by watches; labels and DRA keys computed on the refresher.

    The pod watch feeds `store` (pod_store), the ResourceSlice watch feeds `dra`; `Freshness` says how long the
    store is trusted while the pod watch fails, `ExtraLabels` turns its pods into labels. It is the
    MappingContext that core.mapping.build_mapping asks for DRA keys, extra labels and which pods have ended.
    """

    def __init__(self, client, node_name: str, spec: LabelSpec, grace_seconds: float = 60.0,
                 resolve_mig=None, clock: Callable[[], float] = time.monotonic, read_owners=None,
                 watch_silence_seconds: float = WATCH_SILENCE_SECONDS, read_seconds: float = ANSWER_SECONDS):
        from lightkube.resources.core_v1 import Pod
        from lightkube.resources.resource_v1 import ResourceSlice

        self.node_name = node_name
        self.store = PodStore(spec, node_name)
        # `read_owners` replaces the owners' metadata reads only (tests that need thousands of them): the
        # queue objects are still read through the reader.
        reader = MetadataReader(client, read_seconds, clock)
        self.workloads = _workloads(reader, clock, read_owners, spec.queue)
        # With --labels.extra queue: LocalQueue and PodGroup reads, through the same discovery and bounds.
        self.queues = QueueLabels(QueueObjects(reader.read, clock), self.workloads) if spec.queue else None
        # `read_seconds` bounds each get's answer: owners, discovery, claims.
        self.dra = DraDevices(lambda namespace, name: read_claim(http_client(client), namespace, name, read_seconds),
                              resolve_mig, clock)
        node = {"spec.nodeName": node_name}
        self.pod_watch = ListWatch(client, Pod, "pods", node, self.store, check=pod_check(node_name),
                                   silence_seconds=watch_silence_seconds)
        self.slice_watch = ListWatch(client, ResourceSlice, "resourceslices", node, self.dra, namespaced=False,
                                     fallback=_slice_v1beta1, check=slice_check(node_name),
                                     silence_seconds=watch_silence_seconds)
        self._fresh = Freshness(lambda: self.pod_watch.healthy, grace_seconds, clock)
        self._extras = ExtraLabels(spec, self.store, self.workloads, self._fresh, node_name, self.queues)

    def start(self) -> None:
        self.pod_watch.start()
        self.slice_watch.start()

    def stop(self) -> None:
        self.pod_watch.stop()
        self.slice_watch.stop()

    @property
    def up(self) -> bool:
        """pod_gpu_exporter_kubernetes_api_up: the pod watch is listed and connected."""
        return self.pod_watch.healthy

    def status(self) -> KubernetesStatus:
        """Both watches' counters, as one immutable snapshot (for /metrics, from any thread)."""
        return KubernetesStatus((self.pod_watch.status(), self.slice_watch.status()))

    # The MappingContext (core.mapping), asked on the refresher.
    def resolve_dra(self, device) -> DraResolution:
        """A kubelet DRA device's key from its ResourceSlice, and whether its claim is adminAccess."""
        return self.dra.resolve(device.resource, device.pool, device.device_id, device.claim)

    def retain_claims(self, devices: List) -> None:
        """Forget the claims that none of the kubelet's devices is held through any more."""
        self.dra.retain_claims({device.claim for device in devices if device.dra})

    def extra_labels_for(self, pods: Iterable[PodKey]) -> Dict[PodKey, tuple]:
        """(namespace, pod) → the extra labels' (name, value) pairs, for the pods the store knows."""
        return self._extras.for_pods(pods)

    def ended_pods(self, pods: Iterable[PodKey]) -> Set[PodKey]:
        """Those of `pods` that hold no device any more, though the kubelet may still report them: phase
        Succeeded or Failed, or deleted since the watch saw them. Only while the store is fresh: without a
        synced watch nothing is known to have ended."""
        return self.store.ended_among(pods) if self._fresh() else set()

    def resource_health_for(self, pods: Iterable[PodKey]) -> Optional[Dict[PodKey, tuple]]:
        """(namespace, pod) → its containers' allocatedResourcesStatus entries, while the store is fresh;
        else None, health unknown to us (a stale store's health would be served as current)."""
        if not self._fresh():
            return None
        infos = {pod: self.store.get(pod) for pod in pods}
        return {pod: info.resource_health for pod, info in infos.items() if info is not None and info.resource_health}

    def device_taints(self) -> tuple:
        """The taints on this node's DRA GPU devices, from its ResourceSlices."""
        return self.dra.taints()

    # Read by the per-process shares, start-up and tests.
    def pods(self) -> Optional[Dict[PodKey, PodInfo]]:
        """A copy of the pod store while it is fresh (the same grace as the extra labels), else None."""
        return self.store.copy() if self._fresh() else None

    def pod(self, namespace: str, name: str) -> Optional[PodInfo]:
        return self.store.get((namespace, name))

    def pod_count(self) -> int:
        return len(self.store)


def _workloads(reader: MetadataReader, clock: Callable[[], float], read_owners, queue: bool) -> Workloads:
    # With queues, each owner's whole metadata is read (the same metadata-only GET) and its queue label kept,
    # whoever reads it: injected reads that answer metadata keep their queues too.
    read = read_owners or (reader.metadata if queue else reader.owner_references)
    return Workloads(read, clock, lambda version, kind: reader.plural(version, kind, read=False)[0],
                     keep=metadata_queue_hint if queue else None)
