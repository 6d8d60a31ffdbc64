"""The Kubernetes source composed: watches feeding a pod store, DRA devices and taint rules, and what reads them.

Everything here runs on background threads or the mapping refresher; a scrape never calls the API.
"""

from __future__ import annotations

import time
from typing import Callable

from exporter.core.device_ids import DeviceForms
from exporter.collectors.kubernetes.dra import DraDevices, read_claim
from exporter.collectors.kubernetes.extra_labels import ExtraLabels
from exporter.collectors.kubernetes.freshness import Freshness
from exporter.collectors.kubernetes.labels import LabelSpec
from exporter.collectors.kubernetes.objects import pod_check, slice_check
from exporter.collectors.kubernetes.pod_store import PodStore
from exporter.collectors.kubernetes.queue_hints import metadata_queue_hint
from exporter.collectors.kubernetes.queues import QueueLabels, QueueObjects
from exporter.collectors.kubernetes.roles import KubernetesLifecycle, KubernetesMapping, KubernetesPods
from exporter.collectors.kubernetes.stream import ANSWER_SECONDS, http_client
from exporter.collectors.kubernetes.taint_rules import DeviceTaintRules, TaintRuleWatch
from exporter.collectors.kubernetes.watch import WATCH_SILENCE_SECONDS, ListWatch
from exporter.collectors.kubernetes.workloads import MetadataReader, Workloads


def _slice_v1beta1():
    # Kubernetes 1.32-1.33 serve DRA as v1beta1 only; imported only there (each API version's models cost RSS).
    from lightkube.resources.resource_v1beta1 import ResourceSlice

    return ResourceSlice


class KubernetesContext:
    """This node's pods and DRA devices, kept by watches; labels and DRA keys computed on the refresher.

    The pod watch feeds `store` (pod_store), the ResourceSlice watch feeds `dra`, the DeviceTaintRule watch
    `taint_rules` (their taints join the slices' own); `Freshness` says how long the
    store is trusted while the pod watch fails, `ExtraLabels` turns its pods into labels. Callers take one
    role each (roles.py): `mapping` (core.mapping's MappingContext), `lifecycle` (start, stop, up, status)
    and `pod_index` (the pods, for the per-process shares).
    """

    def __init__(self, client, node_name: str, spec: LabelSpec, forms: DeviceForms, grace_seconds: float = 60.0,
                 resolve_mig=None, clock: Callable[[], float] = time.monotonic, read_owners=None,
                 watch_silence_seconds: float = WATCH_SILENCE_SECONDS, read_seconds: float = ANSWER_SECONDS):
        from lightkube.resources.core_v1 import Pod
        from lightkube.resources.resource_v1 import ResourceSlice

        self.store = PodStore(spec, node_name)
        # `read_owners` replaces the owners' metadata reads only (tests that need thousands of them): the
        # queue objects are still read through the reader.
        reader = MetadataReader(client, read_seconds, clock)
        self.workloads = _workloads(reader, clock, read_owners, spec.queue)
        # With --labels.extra queue: LocalQueue and PodGroup reads, through the same discovery and bounds.
        self.queues = QueueLabels(QueueObjects(reader.read, clock), self.workloads) if spec.queue else None
        # `read_seconds` bounds each get's answer: owners, discovery (the rules' too), claims.
        self.dra = DraDevices(lambda namespace, name: read_claim(http_client(client), namespace, name, read_seconds),
                              forms, resolve_mig, clock)
        node = {"spec.nodeName": node_name}
        self.pod_watch = ListWatch(client, Pod, "pods", node, self.store, check=pod_check(node_name),
                                   silence_seconds=watch_silence_seconds)
        self.slice_watch = ListWatch(client, ResourceSlice, "resourceslices", node, self.dra, namespaced=False,
                                     fallback=_slice_v1beta1, check=slice_check(node_name),
                                     silence_seconds=watch_silence_seconds)
        self.taint_rules = DeviceTaintRules()
        self.rule_watch = TaintRuleWatch(client, self.taint_rules, silence_seconds=watch_silence_seconds,
                                         read_seconds=read_seconds)
        fresh = Freshness(lambda: self.pod_watch.healthy, grace_seconds, clock)
        extras = ExtraLabels(spec, self.store, self.workloads, fresh, node_name, self.queues)
        self.mapping = KubernetesMapping(self.dra, self.store, extras, fresh, self.taint_rules)
        self.lifecycle = KubernetesLifecycle(node_name, self.pod_watch, self.slice_watch, self.dra, self.rule_watch,
                                             store=self.store)
        self.pod_index = KubernetesPods(self.store, fresh)


def _workloads(reader: MetadataReader, clock: Callable[[], float], read_owners, queue: bool) -> Workloads:
    # With queues, each owner's whole metadata is read (the same metadata-only GET) and its queue label kept,
    # whoever reads it: injected reads that answer metadata keep their queues too.
    read = read_owners or (reader.metadata if queue else reader.owner_references)
    return Workloads(read, clock, lambda version, kind: reader.plural(version, kind, read=False)[0],
                     keep=metadata_queue_hint if queue else None)
