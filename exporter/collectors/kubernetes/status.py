"""What the Kubernetes source says of itself on /metrics: an immutable snapshot of each watch's counters."""

from __future__ import annotations

from types import MappingProxyType
from typing import Dict, Mapping, NamedTuple, Tuple


class WatchStatus(NamedTuple):
    """One watch's counters at one moment."""

    resource: str  # "pods", "resourceslices"
    requests: int  # list and watch requests made (a list's pages count once)
    dropped: Mapping[str, int]  # reason → watch connections we closed (silent, too_large, undecodable)
    skipped: Mapping[str, int]  # reason → objects left out of the cache (malformed, other_node)


class KubernetesStatus(NamedTuple):
    """Every watch (pod_gpu_exporter_kubernetes_api_up is read from the context's `up`, per scrape)."""

    watches: Tuple[WatchStatus, ...]
    malformed_annotations: int = 0  # pod versions whose HAMi annotation could not be read (pod_store)


def frozen_counts(counts: Dict[str, int]) -> Mapping[str, int]:
    """A read-only copy: the snapshot does not change as the watch goes on counting."""
    return MappingProxyType(dict(counts))
