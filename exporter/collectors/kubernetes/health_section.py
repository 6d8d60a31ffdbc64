"""The Kubernetes context's section: pod_gpu_device_health_status and pod_gpu_device_taint, the mapping's device health and DRA taints as series."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Tuple

from exporter.core.health import DeviceTaint, combined_status
from exporter.core.identity import GpuIdentity, GpuKey, SampleDialect
from exporter.core.mapping import Mapping
from exporter.collectors.kubernetes import families
from exporter.exposition.labels import DEFAULT_DIALECT, device_label_pairs, identities_by_key, naming_labels
from exporter.exposition.sections import BaseSection, Gauge, ScrapeView
from exporter.exposition.rows import label_text, render_family

HEALTH, TAINT = families.DEVICE_HEALTH, families.DEVICE_TAINT
Pairs = Tuple[Tuple[str, str], ...]


def render_device_health(mapping: Mapping, identities: Iterable[GpuIdentity],
                         dialect: SampleDialect = DEFAULT_DIALECT) -> str:
    """`pod_gpu_device_health_status{UUID,gpu[,GPU_I_ID],status} 1` for each held device (`unknown` where its
    holders' pod status says nothing), then `pod_gpu_device_taint{UUID,gpu[,GPU_I_ID],key,value,effect} 1`
    per DRA taint.

    Devices are named as on pod_gpu_allocation_info (labels.device_label_pairs), so that rules join the two
    on the device: a device no sample carried keeps the name its key gives, and one that has neither UUID
    nor gpu (a DRA device known only as "nvidia0") has no row, since it could be told from no other. The
    device's labels are the vendor's (`dialect`).
    """
    health = mapping.device_health
    if not health.statuses and not health.taints:
        return ""
    by_key = identities_by_key(identities)
    naming = naming_labels(dialect)
    statuses = sorted(_statuses_by_device(health.statuses, by_key, dialect, naming).items())
    taints = _taints_by_device(health.taints, by_key, dialect, naming)
    return (render_family(HEALTH, ((label_text(HEALTH, dict(status=status), device=pairs), 1)
                                   for pairs, status in statuses))
            + render_family(TAINT, ((label_text(TAINT, dict(taint), device=pairs), 1) for pairs, taint in taints)))


def _statuses_by_device(health: Dict[GpuKey, str], by_key: Dict[GpuKey, GpuIdentity], dialect: SampleDialect,
                        naming: frozenset) -> Dict[Pairs, str]:
    """The device's label pairs → its status. Two keys of one GPU (held by index and by UUID) name the
    same device once the samples carry it: one series, the combined_status status."""
    statuses: Dict[Pairs, str] = {}
    for key, status in health.items():
        pairs = _named(device_label_pairs(key, by_key, dialect), naming)
        if pairs:
            statuses[pairs] = combined_status(statuses.get(pairs, status), status)
    return statuses


def _taints_by_device(taints: Iterable[DeviceTaint], by_key: Dict[GpuKey, GpuIdentity], dialect: SampleDialect,
                      naming: frozenset) -> List[Tuple[Pairs, Pairs]]:
    """Each taint's (device pairs, taint pairs), in the mapping's order; one series for a taint two keys of a
    GPU repeat."""
    rows: Dict[Tuple[Pairs, Pairs], None] = {}
    for taint in taints:
        device = _named(device_label_pairs(taint.key, by_key, dialect), naming)
        if device:
            rows[(device, (("key", taint.taint_key), ("value", taint.value), ("effect", taint.effect)))] = None
    return list(rows)


def _named(pairs: Pairs, naming: frozenset) -> Pairs:
    """`pairs` if they name the device by a label that tells it alone (UUID or gpu on NVIDIA), else (): a
    row with neither joins any device."""
    return pairs if any(name in naming for name, _ in pairs) else ()


class DeviceHealthSection(BaseSection):
    """The held devices' health and taints, kept with the rewrite; it owns pod_gpu_exporter_kubernetes_api_up,
    and is up while the Kubernetes API's pod watch is healthy."""

    name = "device_health"

    def __init__(self, kubernetes_up: Callable[[], bool], dialect: SampleDialect = DEFAULT_DIALECT):
        super().__init__(kubernetes_up)
        self._dialect = dialect  # the vendor's labels for a device

    def _rows(self, view: ScrapeView) -> bytes:
        return render_device_health(view.snapshot.mapping, view.identities, self._dialect).encode()

    def gauges(self) -> Iterable[Gauge]:
        return ((families.KUBERNETES_API_UP, int(bool(self._up()))),)
