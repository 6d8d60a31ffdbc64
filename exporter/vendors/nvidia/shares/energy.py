"""Pure: one refresh's energy delta of a GPU, in millijoules, split between its holders and the unattributed reasons."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple

from exporter.core.identity import GpuIdentity, Owner
from exporter.vendors.nvidia.shares.apportion import largest_remainder
from exporter.vendors.nvidia.shares.compute import SM_UNITS, DeviceShares

IDLE = "idle"  # the part of a shared device's energy no holder's activity accounts for (policy unattributed)
NO_HOLDER = "no_holder"  # a device held by no pod
ENERGY_REASONS = (IDLE, NO_HOLDER)
SPLIT, UNATTRIBUTED = "split", "unattributed"
IDLE_POLICIES = (SPLIT, UNATTRIBUTED)  # --energy.idle-policy's choices, the first its default


class EnergySplit(NamedTuple):
    holders: Dict[Tuple[GpuIdentity, Owner], int]  # mJ given to each holder of each device
    unattributed: Dict[Tuple[GpuIdentity, str], int]  # mJ left to a reason, per device


def split_gpu_energy(delta_mj: int, instances: Sequence[DeviceShares], idle_policy: str) -> EnergySplit:
    """One GPU's energy delta split exactly: the parts add up to `delta_mj`, to the millijoule.

    `instances` are the GPU's devices in one snapshot: the whole GPU, or its MIG instances. NVML
    measures energy per board, so a MIG GPU's delta is first split by instance size (memory slices);
    each device's part then goes
    - to nobody (`no_holder`) when no pod holds it;
    - whole to its holder when one container holds it;
    - between several holders by their measured SM activity, and the rest of it (time no holder's
      process was busy on the SMs, or no per-process utilisation to tell) evenly between them
      (`split`) or to `idle` (`unattributed`).
    """
    split = EnergySplit({}, {})
    weights = [entry.memory_slices for entry in instances] if len(instances) > 1 else [1]
    for entry, part in zip(instances, largest_remainder(delta_mj, weights)):
        _split_device(part, entry, idle_policy, split)
    return split


def _split_device(delta_mj: int, entry: DeviceShares, idle_policy: str, split: EnergySplit) -> None:
    device, holders = entry.device, entry.holders
    for reason in ENERGY_REASONS:
        split.unattributed.setdefault((device, reason), 0)
    if not holders:
        split.unattributed[(device, NO_HOLDER)] += delta_mj
        return
    given: List[int] = [0] * len(holders)
    if len(holders) == 1:
        given[0], inactive = delta_mj, 0
    elif any(share.sm_units is None for share in holders):
        inactive = delta_mj  # no per-process utilisation here (MIG, older GPUs): no activity to split by
    else:
        active = [share.sm_units for share in holders]  # compute.py keeps their sum within SM_UNITS
        *given, inactive = largest_remainder(delta_mj, active + [SM_UNITS - sum(active)])
    if idle_policy == SPLIT:
        given = [mj + even for mj, even in zip(given, largest_remainder(inactive, [1] * len(holders)))]
    else:
        split.unattributed[(device, IDLE)] += inactive
    for share, mj in zip(holders, given):
        split.holders[(device, share.owner)] = split.holders.get((device, share.owner), 0) + mj
