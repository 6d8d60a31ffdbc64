"""pod_gpu_device_health_status and pod_gpu_device_taint: the mapping's device health and DRA taints as series."""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from exporter.core.identity import GpuIdentity, GpuKey
from exporter.core.mapping import Mapping
from exporter.exposition import families
from exporter.exposition.labels import gpu_label_pairs, identities_by_key
from exporter.exposition.text import render_label_pairs

DEVICE_HEALTH = families.DEVICE_HEALTH.name
DEVICE_TAINT = families.DEVICE_TAINT.name


def render_device_health(mapping: Mapping, identities: Iterable[GpuIdentity]) -> str:
    """`pod_gpu_device_health_status{UUID,gpu[,GPU_I_ID],status} 1` for each held device some holder's pod
    status reports on, then `pod_gpu_device_taint{UUID,gpu[,GPU_I_ID],key,value,effect} 1` per DRA taint.

    UUID and gpu come from the samples that carried the device, as on pod_gpu_allocation_info; a device
    no sample carried (dcgm-exporter down, or the GPU fallen off the bus) keeps the name its key gives.
    """
    if not mapping.health and not mapping.taints:
        return ""
    by_key = identities_by_key(identities)
    lines: List[str] = []
    if mapping.health:
        lines.append(families.DEVICE_HEALTH.header)
        for key, status in sorted(mapping.health.items()):
            pairs = _device_pairs(key, by_key) + (("status", status),)
            lines.append(f"{DEVICE_HEALTH}{{{render_label_pairs(pairs)}}} 1\n")
    if mapping.taints:
        lines.append(families.DEVICE_TAINT.header)
        for taint in mapping.taints:
            pairs = _device_pairs(taint.key, by_key) + (
                ("key", taint.taint_key), ("value", taint.value), ("effect", taint.effect))
            lines.append(f"{DEVICE_TAINT}{{{render_label_pairs(pairs)}}} 1\n")
    return "".join(lines)


def _device_pairs(key: GpuKey, by_key: Dict[GpuKey, GpuIdentity]) -> Tuple[Tuple[str, str], ...]:
    identity = by_key.get(key)
    if identity is not None:
        return gpu_label_pairs(identity)
    # No sample carried it: the name its key gives (UUID or index), the other written empty, which
    # Prometheus reads as absent; a key by device name ("nvidia0") gives neither.
    pairs = (("UUID", key.value if key.label == "UUID" else ""), ("gpu", key.value if key.label == "gpu" else ""))
    return pairs + ((("GPU_I_ID", key.instance),) if key.instance else ())

