"""How many GPUs each allocation stands for: 1 per whole GPU, a replica's or a MIG instance's fraction of one."""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from exporter.core.device_ids import DeviceForms
from exporter.core.hami import share_of


def count_offered(devices: Iterable[Tuple[str, str]], forms: DeviceForms) -> Dict[Tuple[str, str], int]:
    """(resource, GPU) → how many replica device IDs the kubelet offers for it, from (resource, device ID)
    pairs, replicas read by the vendor's `forms`."""
    seen = {(resource, forms.replica_of(device_id), device_id) for resource, device_id in devices}
    counts: Dict[Tuple[str, str], int] = {}
    for resource, gpu, _device_id in seen:
        if gpu is not None:
            counts[(resource, gpu)] = counts.get((resource, gpu), 0) + 1
    return counts


def allocated_gpus(allocations, forms: Optional[DeviceForms], offered: Optional[Dict[Tuple[str, str], int]] = None,
                   gpu_memory_mib: Optional[Dict[str, float]] = None) -> Dict[Tuple[str, str, str], float]:
    """(namespace, pod, container) → the GPUs it holds, over allocations of one mapping, read by the
    vendor's `forms` (a mapping's own: Mapping.forms; None only for a mapping of no allocation).

    A time-slicing replica is 1/N of its GPU, N the replicas the kubelet offers for it (`offered`,
    from GetAllocatableResources). Otherwise devices resolving to one GPU or MIG instance (one key)
    split it evenly: the replicas the kubelet lists as held, or the containers sharing one DRA device
    through a claim, so that its holders add up to what the device counts for. Containers whose every
    device is of unknown share are left out. A HAMi replica followed to its GPU (Allocation.hami) is
    the share HAMi gave: its cores, or its memory when cores is 0 (out of `gpu_memory_mib`, by UUID).
    """
    offered = offered or {}
    allocations = tuple(allocations)
    node_profiles = {a.profile or forms.partition_profile(a.resource) for a in allocations} - {""}
    group_sizes: Dict[object, int] = {}
    for allocation in allocations:
        if allocation.hami:
            continue  # its share is its own, whoever else holds its GPU
        group = _group_of(allocation, forms)
        group_sizes[group] = group_sizes.get(group, 0) + 1
    totals: Dict[Tuple[str, str, str], float] = {}
    for allocation in allocations:
        if allocation.hami:
            share = share_of(*allocation.hami, (gpu_memory_mib or {}).get(allocation.key.value if allocation.key else ""))
            if share is not None:
                owner = tuple(allocation.owner)
                totals[owner] = totals.get(owner, 0.0) + share
            continue
        share = forms.whole_device_share(allocation.resource, allocation.device_id, allocation.dra,
                                         allocation.profile, node_profiles, allocation.parts)
        if share is None:
            continue
        replicas = offered.get((allocation.resource, forms.replica_of(allocation.device_id) or ""))
        owner = tuple(allocation.owner)
        totals[owner] = totals.get(owner, 0.0) + share / (replicas or group_sizes[_group_of(allocation, forms)])
    return totals


def memory_shared_gpus(allocations) -> frozenset:
    """The UUIDs of GPUs a HAMi device shares by memory alone (cores 0): their size tells its share."""
    return frozenset(a.key.value for a in allocations
                     if a.hami and not a.hami[1] and a.key is not None and a.key.label == "UUID")


def _group_of(allocation, forms: DeviceForms) -> object:
    # Replicas of one GPU resolve to one key; an unresolved device stands alone but for its replicas.
    if allocation.key is not None:
        return allocation.key
    return (allocation.resource, forms.replica_of(allocation.device_id) or allocation.device_id)
