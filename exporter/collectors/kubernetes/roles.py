"""The Kubernetes source's three roles, each what one kind of caller takes: the mapping's, the lifecycle, the pod index.

`context.KubernetesContext` builds the parts (watches, pod store, DRA devices, extra labels) and hands each
role only the parts it reads.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Set

from exporter.core.mapping import DraResolution
from exporter.collectors.kubernetes.dra import DraDevices
from exporter.collectors.kubernetes.extended_resources import ContainerShare, container_share
from exporter.collectors.kubernetes.extra_labels import ExtraLabels
from exporter.collectors.kubernetes.labels import PodInfo
from exporter.collectors.kubernetes.pod_store import PodKey, PodStore
from exporter.collectors.kubernetes.status import KubernetesStatus
from exporter.collectors.kubernetes.taint_rules import DeviceTaintRules


class KubernetesMapping:
    """The MappingContext (core.mapping) that build_mapping asks for DRA keys, extra labels, ended pods,
    device health and taints. Asked on the mapping refresher only."""

    def __init__(self, dra: DraDevices, store: PodStore, extras: ExtraLabels, fresh: Callable[[], bool],
                 taint_rules: Optional[DeviceTaintRules] = None):
        self._dra = dra
        self._taint_rules = taint_rules
        self._store = store
        self._extras = extras
        self._fresh = fresh  # whether the pod store is trusted (the pod watch up, or within its grace)

    def resolve_dra(self, device) -> DraResolution:
        """A kubelet DRA device's key from its ResourceSlice, whether its claim is adminAccess, and, for the
        claim the scheduler made for the pod's extended resources, whether this container holds it."""
        resolution = self._dra.resolve(device.resource, device.pool, device.device_id, device.claim)
        share = None if resolution.admin_access else self._extended_share(device)
        return resolution if share is None else resolution._replace(held=share.held, resource=share.resource)

    def _extended_share(self, device) -> Optional[ContainerShare]:
        """None unless the device comes through its pod's extended-resource claim and that claim's results
        are known: then the kubelet's listing (the whole claim under each container) is all there is."""
        # Read fresh or not: a pod's claim name never changes, and a pod made again under its name (a
        # StatefulSet's) gets a claim of another name, which then matches nothing.
        info = self._store.get((device.namespace, device.pod))
        claim = info.extended_claim if info is not None else None
        if claim is None or device.claim != f"{device.namespace}/{claim.name}":
            return None
        requests = self._dra.requests_for(device.claim, (device.resource, device.pool, device.device_id))
        return container_share(claim, device.container, requests) if requests else None

    def retain_claims(self, devices: List) -> None:
        """Forget the claims that none of the kubelet's devices is held through any more."""
        self._dra.retain_claims({device.claim for device in devices if device.dra})

    def extra_labels_for(self, pods: Iterable[PodKey]) -> Dict[PodKey, tuple]:
        """(namespace, pod) → the extra labels' (name, value) pairs, for the pods the store knows."""
        return self._extras.for_pods(pods)

    def ended_pods(self, pods: Iterable[PodKey]) -> Set[PodKey]:
        """Those of `pods` that hold no device any more, though the kubelet may still report them: phase
        Succeeded or Failed, or deleted since the watch saw them. Only while the store is fresh: without a
        synced watch nothing is known to have ended."""
        return self._store.ended_among(pods) if self._fresh() else set()

    def resource_health_for(self, pods: Iterable[PodKey]) -> Optional[Dict[PodKey, tuple]]:
        """(namespace, pod) → its containers' allocatedResourcesStatus entries, while the store is fresh;
        else None, health unknown to us (a stale store's health would be served as current)."""
        if not self._fresh():
            return None
        infos = {pod: self._store.get(pod) for pod in pods}
        return {pod: info.resource_health for pod, info in infos.items() if info is not None and info.resource_health}

    def device_taints(self) -> tuple:
        """The taints on this node's DRA GPU devices: its ResourceSlices' own and the DeviceTaintRules' on them."""
        return self._dra.taints(self._taint_rules.taints_for if self._taint_rules is not None else None)

    def published_drivers(self) -> Set[str]:
        """The DRA drivers of this node's ResourceSlices, whoever's GPUs they publish."""
        return self._dra.drivers()

    def hami_assignments(self, pods: Iterable[PodKey]) -> Dict[PodKey, dict]:
        """(namespace, pod) → container → the GPUs HAMi's annotation says it got, for the bound pods the
        store knows. A stale store is used too: a running pod's assignment never changes."""
        infos = {pod: self._store.get(pod) for pod in pods}
        return {pod: dict(info.hami) for pod, info in infos.items() if info is not None and info.hami}


class KubernetesLifecycle:
    """The watches started and stopped, and what they say of themselves (kubernetes_api_up, /metrics)."""

    def __init__(self, node_name: str, pod_watch, slice_watch, dra: DraDevices, rule_watch=None, *,
                 store: Optional[PodStore] = None):
        self.node_name = node_name
        self._store = store  # for its count of unreadable HAMi annotations
        self._pod_watch = pod_watch
        self._slice_watch = slice_watch
        self._dra = dra
        # The DeviceTaintRule watch: started and stopped with the others, never awaited (most clusters lack the kind).
        self._watches = (pod_watch, slice_watch) + ((rule_watch,) if rule_watch is not None else ())

    def start(self, resolve_mig=None) -> None:
        """Start the watches; `resolve_mig` (NVML's, wired after the context is made) names dynamic MIG devices."""
        if resolve_mig is not None:
            self._dra.resolve_mig = resolve_mig
        for watch in self._watches:
            watch.start()

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()

    @property
    def up(self) -> bool:
        """pod_gpu_exporter_kubernetes_api_up: the pod watch is listed and connected."""
        return self._pod_watch.healthy

    @property
    def slices_up(self) -> bool:
        """The ResourceSlice watch is listed and connected."""
        return self._slice_watch.healthy

    def status(self) -> KubernetesStatus:
        """The watches' counters, as one immutable snapshot (for /metrics, from any thread)."""
        return KubernetesStatus(tuple(watch.status() for watch in self._watches),
                                self._store.malformed_annotations if self._store is not None else 0)


class KubernetesPods:
    """The pod index: this node's pods as the store has them: `pods()` for the per-process shares while
    it is fresh; `pod()` and its size read the store as it is, fresh or not."""

    def __init__(self, store: PodStore, fresh: Callable[[], bool]):
        self._store = store
        self._fresh = fresh

    def pods(self) -> Optional[Dict[PodKey, PodInfo]]:
        """A copy of the pod store while it is fresh (the same grace as the extra labels), else None."""
        return self._store.copy() if self._fresh() else None

    def pod(self, namespace: str, name: str) -> Optional[PodInfo]:
        return self._store.get((namespace, name))

    def __len__(self) -> int:
        return len(self._store)
