"""What the Kubernetes source says of itself: an immutable snapshot of each watch, for /metrics and the up gauge."""

from __future__ import annotations

from types import MappingProxyType
from typing import Dict, Mapping, NamedTuple, Tuple


class WatchStatus(NamedTuple):
    """One watch's counters and health at one moment."""

    resource: str  # "pods", "resourceslices"
    healthy: bool
    requests: int  # list and watch requests made (a list's pages count once)
    dropped: Mapping[str, int]  # reason → watch connections we closed (silent, too_large)
    skipped: Mapping[str, int]  # reason → objects left out of the cache (malformed, other_node)


class KubernetesStatus(NamedTuple):
    """Both watches; `up` is pod_gpu_exporter_kubernetes_api_up: the pod watch is listed and connected."""

    up: bool
    watches: Tuple[WatchStatus, ...]


def frozen_counts(counts: Dict[str, int]) -> Mapping[str, int]:
    """A read-only copy: the snapshot does not change as the watch goes on counting."""
    return MappingProxyType(dict(counts))
