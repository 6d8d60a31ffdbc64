"""The share series of one refresh as exposition text (no I/O): holders, remainders, energy and idle counters."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Tuple
from typing import Mapping as MappingType

from exporter.core.identity import GpuIdentity
from exporter.exposition.families import Family
from exporter.vendors.nvidia.families import (CONTAINER_ENERGY, CONTAINER_IDLE, CONTAINER_MEMORY, CONTAINER_SM,
                                              UNALLOCATED_MEMORY, UNALLOCATED_SM, UNATTRIBUTED_ENERGY,
                                              UNATTRIBUTED_MEMORY, UNATTRIBUTED_PROCESSES, UNATTRIBUTED_SM)
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import gpu_label_pairs, render_owner_labels, render_owner_labels_within
from exporter.exposition.rows import label_text, render_family
from exporter.exposition.text import LabelPairs
from exporter.vendors.nvidia.shares.compute import SM_UNITS, Shares, UnallocatedShare
from exporter.vendors.nvidia.shares.energy import ENERGY_REASONS
from exporter.vendors.nvidia.shares.ledger import Counters, HolderKey

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
    devices = {entry.device: _cached(cache, entry.device, lambda device=entry.device: label_text(
        UNATTRIBUTED_PROCESSES, dict(gpu_label_pairs(device)))) for entry in shares.devices}
    labels = {(share.device, share.owner): _cached(cache, (share.device, share.owner), lambda share=share: label_text(
        CONTAINER_MEMORY, dict(gpu_label_pairs(share.device)), render_owner_labels_within(
            share.owner, style, extra_labels.get((share.owner.namespace, share.owner.pod), ()), limit,
            len(gpu_label_pairs(share.device)))))
        for share in shares.holders}

    def holder(device: GpuIdentity, owner) -> str:
        return labels[(device, owner)]

    def remainder(device: GpuIdentity, reason: str) -> str:
        return _cached(cache, (device, reason), lambda: label_text(
            UNATTRIBUTED_MEMORY, dict(gpu_label_pairs(device), reason=reason)))

    holders = shares.holders
    remainders = [r for entry in shares.devices for r in entry.remainders]
    lines: List[str] = []
    _family(lines, CONTAINER_MEMORY, ((holder(s.device, s.owner), str(s.memory_bytes)) for s in holders))
    _family(lines, CONTAINER_SM, ((holder(s.device, s.owner), _ratio(s.sm_units)) for s in holders
                                  if s.sm_units is not None))
    _family(lines, UNATTRIBUTED_MEMORY, ((remainder(r.device, r.reason), str(r.memory_bytes)) for r in remainders))
    _family(lines, UNATTRIBUTED_SM, ((remainder(r.device, r.reason), _ratio(r.sm_units)) for r in remainders
                                     if r.sm_units is not None))
    _family(lines, UNATTRIBUTED_PROCESSES, ((devices[device], str(count)) for device, count in shares.unattributed))
    if counters is not None:
        _counters(lines, shares, counters, holder, remainder)
    return "".join(lines)


def render_unallocated(shares: Shares, style: str, label_cache: Optional[Dict[tuple, str]] = None) -> str:
    """Who uses a device they do not hold (the not_holder remainder by container), after render_shares'
    series. Owner labels only: such a pod's extra labels are not in the mapping (it holds no GPU here,
    or not this one). `label_cache`: the label texts of the last refresh, kept by the caller; left with
    this refresh's only, since these containers come and go whatever the mapping does."""
    cache = {} if label_cache is None else label_cache
    used: Dict[tuple, str] = {}

    def labels(share: UnallocatedShare) -> str:
        key = (share.device, share.owner)
        if key not in used:
            used[key] = cache.get(key) or label_text(UNALLOCATED_MEMORY, dict(gpu_label_pairs(share.device)),
                                                     render_owner_labels(share.owner, style))
        return used[key]

    lines: List[str] = []
    outsiders = shares.unallocated
    _family(lines, UNALLOCATED_MEMORY, ((labels(s), str(s.memory_bytes)) for s in outsiders))
    _family(lines, UNALLOCATED_SM, ((labels(s), _ratio(s.sm_units)) for s in outsiders if s.sm_units is not None))
    cache.clear()
    cache.update(used)
    return "".join(lines)


def _counters(lines: List[str], shares: Shares, counters: Counters, holder: Callable[[GpuIdentity, object], str],
              reason: Callable[[GpuIdentity, str], str]) -> None:
    keys: List[HolderKey] = [(share.device, share.owner) for share in shares.holders]
    unattributed = [(entry.device, reason) for entry in shares.devices for reason in ENERGY_REASONS]
    _family(lines, CONTAINER_ENERGY, ((holder(*key), _joules(counters.holder_energy_mj[key])) for key in keys
                                      if key in counters.holder_energy_mj))
    _family(lines, UNATTRIBUTED_ENERGY, ((reason(*key), _joules(counters.unattributed_energy_mj[key]))
                                         for key in unattributed if key in counters.unattributed_energy_mj))
    _family(lines, CONTAINER_IDLE, ((holder(*key), f"{counters.idle_seconds[key]:.3f}") for key in keys
                                    if key in counters.idle_seconds))


def _cached(cache: Dict[tuple, str], key, write: Callable[[], str]) -> str:
    text = cache.get(key)
    if text is None:
        text = cache[key] = write()
    return text


def _family(lines: List[str], family: Family, samples: Iterable[Tuple[str, str]]) -> None:
    lines.append(render_family(family, samples))


def _ratio(units: Optional[int]) -> str:
    return format((units or 0) / SM_UNITS, "g")


def _joules(millijoules: int) -> str:
    """Exact to the millijoule: integer arithmetic, never a float's rounding."""
    return f"{millijoules // 1000}.{millijoules % 1000:03d}"
