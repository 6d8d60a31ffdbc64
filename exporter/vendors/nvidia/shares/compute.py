"""Pure: each holding container's own share of a GPU or MIG instance, and what is left to no holder, from NVML's processes."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List
from typing import Mapping as MappingType
from typing import NamedTuple, Optional, Tuple

from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import Mapping
from exporter.vendors.nvidia.shares.apportion import largest_remainder
from exporter.vendors.nvidia.nvml.processes import DeviceProcesses
from exporter.sources.procfs import ProcessOwner

# Why a process's use belongs to none of the device's holders.
HOST = "host"  # a process in no pod (Xorg, the MPS control daemon), or one whose cgroup could not be read
NOT_HOLDER = "not_holder"  # a process of a pod (or a container of it) that does not hold this device
REASONS = (HOST, NOT_HOLDER)
# SM utilisation is added up in whole 1/10000ths of the device, so that sums are exact and a device's
# shares can be made to add up to at most 1 without float rounding pushing them over.
SM_UNITS = 10_000


def _sm_ratio(share) -> Optional[float]:
    """A share's SM units as a fraction of the device (None where NVML gave no SM figure): each share's sm_ratio."""
    return None if share.sm_units is None else share.sm_units / SM_UNITS


class PodContainers(NamedTuple):
    """One pod's names and its containers by runtime ID: what tells a process's cgroup owner apart."""

    namespace: str
    pod: str
    containers: Dict[str, str]  # container ID without the runtime prefix ("containerd://") → container name


PodIndex = MappingType[str, PodContainers]  # pod UID → PodContainers


class HolderShare(NamedTuple):
    device: GpuIdentity
    owner: Owner
    memory_bytes: int
    sm_units: Optional[int]  # in SM_UNITS; None on devices where NVML reports no per-process utilisation
    processes: int  # how many of the holder's processes NVML listed on the device (0: held, unused)

    sm_ratio = property(_sm_ratio)


class Remainder(NamedTuple):
    """What processes given to no holder use on one device, for one reason."""

    device: GpuIdentity
    reason: str
    memory_bytes: int
    sm_units: Optional[int]
    processes: int

    sm_ratio = property(_sm_ratio)


class UnallocatedShare(NamedTuple):
    """What one named container's processes use on a device it does not hold: a part of the device's
    not_holder remainder (the rest of it is processes of pods or containers the API does not name)."""

    device: GpuIdentity
    owner: Owner
    memory_bytes: int
    sm_units: Optional[int]
    processes: int

    sm_ratio = property(_sm_ratio)


class DeviceShares(NamedTuple):
    """One device of one NVML snapshot: its holders, then its remainders (one per reason, REASONS order);
    their memory adds up to exactly the memory of every process NVML listed on it."""

    device: GpuIdentity
    holders: Tuple[HolderShare, ...]
    remainders: Tuple[Remainder, ...]
    energy_mj: Optional[int] = None  # the board's energy counter as read in the same snapshot
    memory_slices: int = 0  # a MIG instance's size; 0 for a whole GPU
    # The not_holder remainder's named containers, by owner; it adds up to at most that remainder
    # (exactly, when the API names every container of it).
    unallocated: Tuple[UnallocatedShare, ...] = ()

    @property
    def processes(self) -> int:
        return sum(share.processes for share in self.holders + self.remainders)


class Shares(NamedTuple):
    devices: Tuple[DeviceShares, ...]

    @property
    def holders(self) -> Tuple[HolderShare, ...]:
        return tuple(share for entry in self.devices for share in entry.holders)

    @property
    def unallocated(self) -> Tuple[UnallocatedShare, ...]:
        return tuple(share for entry in self.devices for share in entry.unallocated)

    @property
    def unattributed(self) -> Tuple[Tuple[GpuIdentity, int], ...]:
        """Per device read, the number of processes given to no holder (0 included)."""
        return tuple((entry.device, sum(r.processes for r in entry.remainders)) for entry in self.devices)


def owner_of_process(owner: Optional[ProcessOwner], pods: PodIndex) -> Optional[Owner]:
    """namespace/pod/container of a process's cgroup owner, or None when the API does not know it."""
    if owner is None or not owner.container_id:
        return None
    pod = pods.get(owner.pod_uid)
    if pod is None:
        return None
    container = pod.containers.get(owner.container_id)
    return None if container is None else Owner(pod.namespace, pod.pod, container)


def compute_shares(devices: Iterable[DeviceProcesses], mapping: Mapping,
                   process_owners: MappingType[int, Optional[ProcessOwner]], pods: PodIndex) -> Shares:
    """Every device read, split between its holders and the remainders.

    `process_owners` holds what each PID's cgroup says (None: outside any pod); a PID missing from it
    could not be read. A process counts for a holder only when its pod UID and container ID name
    exactly that holder: a host process, another pod's, or an unreadable one is never given away; it
    goes to a remainder instead, so that nothing NVML listed is lost.
    """
    return Shares(tuple(_device_shares(entry, mapping.owners_of(entry.device), process_owners, pods)
                        for entry in devices))


def _device_shares(entry: DeviceProcesses, owners: Tuple[Owner, ...],
                   process_owners: MappingType[int, Optional[ProcessOwner]], pods: PodIndex) -> DeviceShares:
    slots: List[Any] = list(owners) + list(REASONS)  # holders first, then one slot per reason
    index = {slot: position for position, slot in enumerate(slots)}
    memory, sm, counts = [0] * len(slots), [0] * len(slots), [0] * len(slots)
    outsiders: Dict[Owner, List[int]] = {}  # a named container not holding the device → [memory, SM units, count]
    for pid, used in entry.memory_bytes.items():
        named = owner_of_process(process_owners.get(pid), pods)
        slot = _slot_of(pid, named, process_owners, index)
        units = 0 if entry.sm_ratio is None else round(entry.sm_ratio.get(pid, 0.0) * SM_UNITS)
        memory[slot] += used
        counts[slot] += 1
        sm[slot] += units
        if named is not None and slot == index[NOT_HOLDER]:
            part = outsiders.setdefault(named, [0, 0, 0])
            part[0], part[1], part[2] = part[0] + used, part[1] + units, part[2] + 1
    holders_sm = None
    if entry.sm_ratio is not None:
        # A holder's processes' shares add up; rounding in the driver can push a sum over 1: capped,
        # then the whole device scaled down to 1 if holders and remainders together pass it.
        holders_sm = _at_most_whole([min(units, SM_UNITS) for units in sm[:len(owners)]] + sm[len(owners):])
    holders = tuple(HolderShare(entry.device, owner, memory[i], None if holders_sm is None else holders_sm[i], counts[i])
                    for i, owner in enumerate(owners))
    remainders = tuple(Remainder(entry.device, reason, memory[i], None if holders_sm is None else holders_sm[i], counts[i])
                       for i, reason in enumerate(REASONS, start=len(owners)))
    not_holder_sm = None if holders_sm is None else holders_sm[index[NOT_HOLDER]]
    unallocated = _unallocated(entry.device, outsiders, sm[index[NOT_HOLDER]], not_holder_sm)
    return DeviceShares(entry.device, holders, remainders, entry.energy_mj, entry.memory_slices, unallocated)


def _slot_of(pid: int, named: Optional[Owner], process_owners: MappingType[int, Optional[ProcessOwner]],
             index: Dict[Any, int]) -> int:
    if pid not in process_owners or process_owners[pid] is None:
        return index[HOST]  # outside any pod, or exited before its cgroup could be read
    return index.get(named, index[NOT_HOLDER]) if named is not None else index[NOT_HOLDER]


def _unallocated(device: GpuIdentity, outsiders: Dict[Owner, List[int]], raw_sm: int,
                 scaled_sm: Optional[int]) -> Tuple[UnallocatedShare, ...]:
    """The named part of the not_holder remainder, one entry per container (sorted by owner). Its SM is
    the remainder's, after any scaling, split again by the containers' own samples; the processes of
    unnamed owners keep their part, so the entries add up to the remainder exactly when all are named."""
    ordered = sorted(outsiders.items())
    sm_parts: List[Optional[int]] = [None] * len(ordered)
    if scaled_sm is not None and ordered:
        named_units = [units for _, (_, units, _) in ordered]
        sm_parts = list(largest_remainder(scaled_sm, named_units + [raw_sm - sum(named_units)])[:-1])
    return tuple(UnallocatedShare(device, owner, used, sm_part, count)
                 for (owner, (used, _, count)), sm_part in zip(ordered, sm_parts))


def _at_most_whole(units: List[int]) -> List[int]:
    """The SM units as they are when they add up to at most the whole device, else scaled to exactly it."""
    return units if sum(units) <= SM_UNITS else largest_remainder(SM_UNITS, units)


def pod_index(pods: Iterable[Tuple[Tuple[str, str], Any]]) -> Dict[str, PodContainers]:
    """pod UID → PodContainers from the Kubernetes API cache's ((namespace, name), pod) items; a pod
    there has `uid` and `containers` as (name, "<runtime>://<id>") pairs."""
    index: Dict[str, PodContainers] = {}
    for (namespace, name), pod in pods:
        # containerStatuses[].containerID is "containerd://<id>", "cri-o://<id>" or "docker://<id>";
        # the cgroup path names the bare ID.
        containers = {container_id.partition("://")[2] or container_id: container
                      for container, container_id in pod.containers}
        index[pod.uid] = PodContainers(namespace, name, containers)
    return index
