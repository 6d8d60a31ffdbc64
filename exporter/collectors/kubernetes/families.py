"""The Kubernetes context's families: its watch's up gauge, the held devices' health and taints, and its watches' counters."""

from __future__ import annotations

from typing import Tuple

from exporter.exposition.families import DEVICE_ORDER, Family, device_first, gathered, self_family, telemetry_family

# What must be on for these to be served.
KUBERNETES_API_SWITCH = "--kubernetes.api"  # its collector's switch
KUBERNETES_API = f"{KUBERNETES_API_SWITCH} in use"

# /gpu/metrics, among the status gauges.
KUBERNETES_API_UP = telemetry_family("pod_gpu_exporter_kubernetes_api_up", "1 while the watch of this node's pods on the "
                               "Kubernetes API server is healthy, else 0.", modes=frozenset({KUBERNETES_API}))

# /gpu/metrics, the held devices' health: after the allocations, from the holders' pod status, the ResourceSlices
# and the DeviceTaintRules.
DEVICE_HEALTH = telemetry_family(
    "pod_gpu_device_health_status", "Health of a GPU or MIG instance held on this node, as its holders' pod status "
    "reports it (allocatedResourcesStatus): 1 for the status it is in; unhealthy when any holder says so.",
    labels=("status",), optional_labels=DEVICE_ORDER, modes=frozenset({KUBERNETES_API}), needs_samples=True,
    **device_first("status"))
DEVICE_TAINT = telemetry_family(
    "pod_gpu_device_taint", "A taint on a DRA device of this node's ResourceSlices, its driver's or a "
    "DeviceTaintRule's that selects it (1 per taint); effect None, NoSchedule or NoExecute (an unknown "
    "one reads as None).",
    labels=("key", "value", "effect"), optional_labels=DEVICE_ORDER, modes=frozenset({KUBERNETES_API}),
    needs_samples=True, **device_first("key", "value", "effect"))

# /metrics, its watches' counters, by resource.
KUBERNETES_REQUESTS = self_family(
    "pod_gpu_exporter_kubernetes_requests_total", "counter", "List and watch requests made to the Kubernetes API "
    "server (a list's pages count once).", ("resource",), modes=frozenset({KUBERNETES_API}))
KUBERNETES_WATCH_DROPPED = self_family(
    "pod_gpu_exporter_kubernetes_watch_dropped_total", "counter", "Watch connections the exporter closed: nothing "
    "arrived within --kubernetes.watch-silence-timeout (silent), a line went past the 4 MiB cap (too_large), or a "
    "line was no event (undecodable: watched again from the last good version).",
    ("resource", "reason"), modes=frozenset({KUBERNETES_API}))
KUBERNETES_OBJECTS_SKIPPED = self_family(
    "pod_gpu_exporter_kubernetes_objects_skipped_total", "counter", "Objects from the Kubernetes API left out of the "
    "cache: not of the shape read (malformed), bound to another node (other_node), or a DeviceTaintRule selecting by "
    "what is not evaluated (unsupported).", ("resource", "reason"),
    modes=frozenset({KUBERNETES_API}))
KUBERNETES_ANNOTATIONS_MALFORMED = self_family(
    "pod_gpu_exporter_kubernetes_annotations_malformed_total", "counter", "Pod annotations the exporter follows that "
    "could not be read (HAMi's hami.io/vgpu-devices-allocated), counted once per pod and value: the pod's GPUs are "
    "attributed by the kubelet's device IDs.", ("annotation",), modes=frozenset({KUBERNETES_API}))

FAMILIES: Tuple[Family, ...] = gathered(globals())
