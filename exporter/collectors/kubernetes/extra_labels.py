"""The extra labels of the pods holding GPUs (--labels.*): each pod's PodInfo from the store, and its workload."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional

from exporter.base.logs import LogOnce
from exporter.collectors.kubernetes.labels import LabelSpec, extra_label_pairs
from exporter.collectors.kubernetes.pod_store import PodKey, PodStore
from exporter.collectors.kubernetes.queues import QueueLabels
from exporter.collectors.kubernetes.workloads import Workloads


class ExtraLabels:
    """(namespace, pod) → the extra labels' (name, value) pairs, for the pods the store knows. Refresher only.

    While the pod watch fails, the store is used as long as `fresh()` says (its grace), then no pod gets
    extras until the watch is back.
    """

    def __init__(self, spec: LabelSpec, store: PodStore, workloads: Workloads, fresh: Callable[[], bool],
                 node_name: str, queues: Optional[QueueLabels] = None):
        self._spec = spec
        self._queues = queues  # with --labels.extra queue
        self._store = store
        self._workloads = workloads
        self._fresh = fresh
        self._node_name = node_name  # for the log line only
        self._unseen_logged = LogOnce()  # pods not (yet) in the store, each logged once while it holds a GPU

    def for_pods(self, pods: Iterable[PodKey]) -> Dict[PodKey, tuple]:
        if not self._spec.enabled or not self._fresh():
            return {}
        extras: Dict[PodKey, tuple] = {}
        pods = list(pods)
        self._unseen_logged.retain(pods)  # forget pods that are gone, so that it stays bounded
        self._workloads.begin_refresh()
        if self._queues is not None:
            self._queues.begin_refresh()
        for namespace, name in pods:
            info = self._store.get((namespace, name))
            if info is None:  # not seen yet (the kubelet can be quicker than the watch): next refresh
                self._unseen_logged.log(
                    (namespace, name), "info", "a pod holding a GPU is not (yet) known to the API server watch: its "
                    "samples lack the extra labels until it is", namespace=namespace, pod=name, node=self._node_name)
                continue
            workload = self._workloads.of(namespace, name, info.controller) if self._spec.workload else None
            queues = self._queues.of(namespace, info) if self._spec.queue and self._queues is not None else None
            extras[(namespace, name)] = extra_label_pairs(self._spec, info, workload, queues)
        return extras
