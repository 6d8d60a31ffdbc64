"""The Kubernetes API context as a collector: --kubernetes.* and --labels.* flags, the mapping context and pod index it offers, its section and its watches' counters."""

from __future__ import annotations

import functools
from typing import Mapping

from exporter.collectors.collector import Collector, Flag, Hub, Kind, SourceState
from exporter.collectors.roles import MAPPING_CONTEXT, POD_INDEX
from exporter.exposition.families import client_family
from exporter.collectors.kubernetes.families import (FAMILIES, KUBERNETES_ANNOTATIONS_MALFORMED, KUBERNETES_API_SWITCH,
                                                      KUBERNETES_OBJECTS_SKIPPED, KUBERNETES_REQUESTS,
                                                      KUBERNETES_WATCH_DROPPED)
from exporter.collectors.kubernetes.labels import compile_key_pattern, extra_choices, label_spec
from exporter.collectors.kubernetes.options import KubernetesOptions

KUBERNETES_API_CHOICES = ("auto", "on", "off")
# How long the first mapping waits for the API's first pod list (its labels): a 5,000-pod node lists
# in ~1.2 s. Never longer than --kubelet.timeout.
API_FIRST_LIST_WAIT_SECONDS = 2.0
_NO_API = "the demo runs its own simulated API server for its simulated pods"


def _extra(value: str) -> str:
    extra_choices(value)
    return value


def _regex(value: str) -> str:
    compile_key_pattern(value)
    return value


class KubernetesCollector(Collector):
    """The API server's pods, workloads, ResourceSlices and DeviceTaintRules, watched; on by --kubernetes.api
    (auto: in a pod, or with a kubeconfig)."""

    name = "kubernetes"
    switch = KUBERNETES_API_SWITCH
    offers = (MAPPING_CONTEXT, POD_INDEX)
    section_sources = {"device_health": "the Kubernetes API"}
    families = FAMILIES
    in_mapping = True  # `mapping` shows each pod's extra labels and keys DRA devices as `serve` does
    flags = (
        Flag("--kubernetes.api", "kubernetes_api", KUBERNETES_API_CHOICES, "Kubernetes API server for pod UIDs, workloads, pod labels and DRA ResourceSlices: auto = when running in a pod or --kubernetes.kubeconfig is set; on = required (start-up fails without a config); off = never.",
             "auto"),
        Flag("--kubernetes.kubeconfig", "kubernetes_kubeconfig", "text", "Kubeconfig file for the API server when not running in a pod (in a pod: the service account)."),
        Flag("--kubernetes.node-name", "kubernetes_node_name", "name", "This node's name; its pods are watched with fieldSelector spec.nodeName=<it>.",
             None, "env NODE_NAME, as the downward API sets it, else the host name"),
        Flag("--kubernetes.watch-silence-timeout", "kubernetes_watch_silence_seconds", "duration", "A watch on which nothing arrives for this long (the API server sends a bookmark about every minute) is dropped and the resource listed again.",
             150.0),
        Flag("--labels.extra", "labels_extra", Kind("LIST", _extra), "Comma list of extra labels from the API: pod_uid (adds pod_uid), workload (adds workload_kind, workload), queue (adds cluster_queue, local_queue: the pod's Kueue, Volcano or KAI Scheduler queue).",
             ""),
        Flag("--labels.pod-labels", "labels_pod_labels", Kind("REGEX", _regex), "Regex (full match) of pod label keys to add as label_<key>, sanitised like kube-state-metrics."),
        Flag("--labels.pod-annotations", "labels_pod_annotations", Kind("REGEX", _regex), "Regex (full match) of pod annotation keys to add as annotation_<key>."),
    )
    refused = {
        # The demo serves --labels.extra from its own API server (its queue labels always: see demo/node.py).
        "demo": dict.fromkeys(("kubernetes_api", "kubernetes_kubeconfig", "kubernetes_node_name",
                               "kubernetes_watch_silence_seconds", "labels_pod_labels", "labels_pod_annotations"),
                              _NO_API),
        "mapping": {"kubernetes_watch_silence_seconds": "it lists the API server once, keeping no watch open"},
    }

    def __init__(self) -> None:
        self._lifecycle = None  # KubernetesLifecycle, once prepared and on
        self._dialect = None  # the vendor's labels for a device, for its rows

    def options(self, config) -> KubernetesOptions:
        """--kubernetes.* and --labels.extra/pod-labels/pod-annotations read into the source's settings, with how
        long the pod cache outlives a failing watch (--kubelet.mapping-max-age)."""
        return KubernetesOptions(
            api=config.kubernetes_api, kubeconfig=config.kubernetes_kubeconfig, node_name=config.kubernetes_node_name,
            labels=label_spec(config.labels_extra, config.labels_pod_labels, config.labels_pod_annotations),
            grace_seconds=config.mapping_max_age_seconds, watch_silence_seconds=config.kubernetes_watch_silence_seconds)

    def enabled(self, config) -> bool:
        return True  # off, or auto without a config, is decided in prepare (it also warns about --labels.*)

    def prepare(self, hub: Hub) -> bool:
        # The source loads lightkube only when a client is made: with the API off, importing it costs
        # nothing, and its one check also warns about --labels.* that cannot act.
        from exporter.collectors.kubernetes.startup import prepare_kubernetes

        context = prepare_kubernetes(self.options(hub.config), hub.devices)
        if context is None:
            return False
        self._lifecycle = context.lifecycle
        self._dialect = hub.dialect
        hub.mapping_context, hub.pod_index = context.mapping, context.pod_index
        return True

    def before_first_mapping(self, hub: Hub):
        """The watches started, and the first pod list awaited briefly on the refresher's thread, so that
        the first mapping carries its labels (an API slower than that adds them at a later refresh)."""
        from exporter.collectors.kubernetes.startup import start_and_wait

        wait = min(hub.config.kubelet_timeout_seconds, API_FIRST_LIST_WAIT_SECONDS)
        return functools.partial(start_and_wait, self._lifecycle, hub.resolve_mig, wait), wait

    def start_for_mapping(self, hub: Hub) -> None:
        """`mapping`: the watches started and their first lists awaited, ResourceSlices included."""
        from exporter.collectors.kubernetes.startup import start_and_wait

        start_and_wait(self._lifecycle, hub.resolve_mig, hub.config.kubelet_timeout_seconds, slices=True)

    def stop(self) -> None:
        if self._lifecycle is not None:
            self._lifecycle.stop()

    def sections(self):
        from exporter.collectors.kubernetes.health_section import DeviceHealthSection

        lifecycle = self._lifecycle
        return (DeviceHealthSection(lambda: lifecycle.up, *([self._dialect] if self._dialect else [])),)

    def self_metrics(self):
        """The API watches' own counters, by resource (`pods`, `resourceslices`, `devicetaintrules`)."""
        status = self._lifecycle.status()
        requests = client_family(KUBERNETES_REQUESTS)
        dropped = client_family(KUBERNETES_WATCH_DROPPED)
        skipped = client_family(KUBERNETES_OBJECTS_SKIPPED)
        for watch in status.watches:
            requests.add_metric([watch.resource], watch.requests)
            for reason in ("silent", "too_large", "undecodable"):
                dropped.add_metric([watch.resource, reason], watch.dropped.get(reason, 0))
            # "unsupported" (a DeviceTaintRule selecting by what is not evaluated) only where it happened.
            for reason in sorted({"malformed", "other_node", *watch.skipped}):
                skipped.add_metric([watch.resource, reason], watch.skipped.get(reason, 0))
        malformed = client_family(KUBERNETES_ANNOTATIONS_MALFORMED)
        malformed.add_metric(["hami.io/vgpu-devices-allocated"], status.malformed_annotations)
        return (requests, dropped, skipped, malformed)

    def state(self) -> SourceState:
        if self._lifecycle.up:
            return SourceState(self.name, True)
        return SourceState(self.name, False, "the pod watch is not listed and connected")
