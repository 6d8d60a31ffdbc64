"""The share series of one refresh as exposition text (no I/O): holders, remainders, energy and idle counters."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Tuple
from typing import Mapping as MappingType

from exporter.core.identity import GpuIdentity
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import gpu_label_pairs, render_owner_labels_within
from exporter.exposition.text import LabelPairs, family_header, render_label_pairs
from exporter.shares.compute import SM_UNITS, Shares
from exporter.shares.energy import ENERGY_REASONS
from exporter.shares.ledger import Counters, HolderKey

MEMORY = "pod_gpu_container_memory_used_bytes"
SM_UTILIZATION = "pod_gpu_container_sm_utilization_ratio"
UNATTRIBUTED_MEMORY = "pod_gpu_unattributed_memory_used_bytes"
UNATTRIBUTED_SM = "pod_gpu_unattributed_sm_utilization_ratio"
UNATTRIBUTED = "pod_gpu_exporter_unattributed_processes"
ENERGY = "pod_gpu_container_energy_joules_total"
UNATTRIBUTED_ENERGY = "pod_gpu_unattributed_energy_joules_total"
IDLE = "pod_gpu_container_idle_seconds_total"

_HELP = {
    MEMORY: "Framebuffer memory used on this GPU or MIG instance by the container's own processes (NVML per-process data).",
    SM_UTILIZATION: "SM utilisation (0-1) of this GPU by the container's own processes over the last sample window (NVML per-process data).",
    UNATTRIBUTED_MEMORY: "Framebuffer memory used on this GPU or MIG instance by processes of none of its holders: "
                         "reason host (no pod, or unreadable) or not_holder (a pod that does not hold it).",
    UNATTRIBUTED_SM: "SM utilisation (0-1) of this GPU by processes of none of its holders, by reason; with the "
                     "holders' it adds up to at most 1.",
    UNATTRIBUTED: "Processes on this GPU or MIG instance that belong to none of its holders (host processes, other pods, unseen PIDs).",
    ENERGY: "Energy (J) of this GPU or MIG instance given to the container while it held it: NVML's board energy "
            "split by instance size and SM activity (--energy.idle-policy).",
    UNATTRIBUTED_ENERGY: "Energy (J) of this GPU or MIG instance given to no holder: reason no_holder (held by no pod) "
                         "or idle (no holder active, --energy.idle-policy unattributed).",
    IDLE: "Seconds the container held this GPU or MIG instance with none of its processes on it.",
}

ExtraLabels = MappingType[Tuple[str, str], LabelPairs]


def render_shares(shares: Shares, style: str, extra_labels: Optional[ExtraLabels] = None,
                  counters: Optional[Counters] = None, label_cache: Optional[Dict[tuple, str]] = None,
                  limit: Optional[LabelLimit] = None) -> str:
    """Every share family with samples, in a fixed order (empty when nothing was read).

    `extra_labels`: (namespace, pod) → the Kubernetes API's extra labels (Mapping.extra_labels),
    written after the owner labels as on pod_gpu_allocation_info, and cut to `limit` (--labels.limit)
    as there. `counters`: the ledger's energy and idle counters after this refresh (none: gauges
    only). `label_cache`: the label texts of earlier refreshes under the same mapping, style and
    limit, kept by the caller (a refresh writes the same ones)."""
    extra_labels = extra_labels or {}
    cache = {} if label_cache is None else label_cache
    # Each holder's and device's label text is written once and used by every family.
    devices = {entry.device: _cached(cache, entry.device, lambda device=entry.device: render_label_pairs(
        gpu_label_pairs(device))) for entry in shares.devices}
    labels = {(share.device, share.owner): _cached(cache, (share.device, share.owner), lambda share=share: (
        devices[share.device] + "," + render_owner_labels_within(
            share.owner, style, extra_labels.get((share.owner.namespace, share.owner.pod), ()), limit,
            len(gpu_label_pairs(share.device)))))
        for share in shares.holders}

    def holder(device: GpuIdentity, owner) -> str:
        return labels[(device, owner)]

    def remainder(device: GpuIdentity, reason: str) -> str:
        return f'{devices[device]},reason="{reason}"'

    holders = shares.holders
    remainders = [r for entry in shares.devices for r in entry.remainders]
    lines: List[str] = []
    _family(lines, MEMORY, ((holder(s.device, s.owner), str(s.memory_bytes)) for s in holders))
    _family(lines, SM_UTILIZATION, ((holder(s.device, s.owner), _ratio(s.sm_units)) for s in holders
                                    if s.sm_units is not None))
    _family(lines, UNATTRIBUTED_MEMORY, ((remainder(r.device, r.reason), str(r.memory_bytes)) for r in remainders))
    _family(lines, UNATTRIBUTED_SM, ((remainder(r.device, r.reason), _ratio(r.sm_units)) for r in remainders
                                     if r.sm_units is not None))
    _family(lines, UNATTRIBUTED, ((devices[device], str(count)) for device, count in shares.unattributed))
    if counters is not None:
        _counters(lines, shares, counters, holder, remainder)
    return "".join(lines)


def _counters(lines: List[str], shares: Shares, counters: Counters, holder: Callable[[GpuIdentity, object], str],
              reason: Callable[[GpuIdentity, str], str]) -> None:
    keys: List[HolderKey] = [(share.device, share.owner) for share in shares.holders]
    unattributed = [(entry.device, reason) for entry in shares.devices for reason in ENERGY_REASONS]
    _family(lines, ENERGY, ((holder(*key), _joules(counters.holder_energy_mj[key])) for key in keys
                            if key in counters.holder_energy_mj), "counter")
    _family(lines, UNATTRIBUTED_ENERGY, ((reason(*key), _joules(counters.unattributed_energy_mj[key]))
                                         for key in unattributed if key in counters.unattributed_energy_mj), "counter")
    _family(lines, IDLE, ((holder(*key), f"{counters.idle_seconds[key]:.3f}") for key in keys
                          if key in counters.idle_seconds), "counter")


def _cached(cache: Dict[tuple, str], key, write: Callable[[], str]) -> str:
    text = cache.get(key)
    if text is None:
        text = cache[key] = write()
    return text


def _family(lines: List[str], name: str, samples: Iterable[Tuple[str, str]], metric_type: str = "gauge") -> None:
    rendered = [f"{name}{{{labels}}} {value}\n" for labels, value in samples]
    if rendered:
        lines.append(family_header(name, _HELP[name], metric_type))
        lines += rendered


def _ratio(units: Optional[int]) -> str:
    return format((units or 0) / SM_UNITS, "g")


def _joules(millijoules: int) -> str:
    """Exact to the millijoule: integer arithmetic, never a float's rounding."""
    return f"{millijoules // 1000}.{millijoules % 1000:03d}"
