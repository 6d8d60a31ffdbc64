"""Pure: HAMi's record of the GPUs each container of a pod really got, and its devices' shares of them.

HAMi's device plugin registers replicas `<GPU-uuid>-<n>` with the kubelet, and unless its preferred-allocation
option is on, the replica the kubelet picks can name another GPU than the one HAMi's Allocate hands the
container. HAMi writes the real assignment into the pod annotation `hami.io/vgpu-devices-allocated`:
per device `UUID,NVIDIA,<memory MiB>,<cores %>` ended by `:`, per container ended by `;`, every container
listed (one without a GPU as an empty entry), init containers first since HAMi v2.9, only the app
containers before (its scheduler, pkg/scheduler/score.go; the encoder is pkg/device/devices.go).
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, NamedTuple, Optional, Sequence, Tuple

ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
BIND_PHASE_ANNOTATION = "hami.io/bind-phase"
BOUND = "success"  # the bind phase once HAMi's Allocate has run: before it the annotation is a plan

_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# A HAMi replica: a whole GPU's UUID (five hex groups) and the replica's number. "GPU-<uuid>" alone, a
# time-slicing "::N" replica and MIG UUIDs never match.
_REPLICA = re.compile(rf"(GPU-{_UUID})-(\d+)")
_NUMBER = re.compile(r"\d+")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/\[\]-]*")  # what a device UUID and type may be made of


class HamiDevice(NamedTuple):
    """One device of one container in HAMi's annotation: the GPU and the share of it HAMi gave."""

    uuid: str
    memory_mib: int
    cores_percent: int  # 0: no cores limit, the memory tells the share


# Container name → its devices, in the annotation's order; containers without a GPU are left out.
Assignment = Dict[str, Tuple[HamiDevice, ...]]


class MalformedAnnotation(ValueError):
    """The annotation is not of HAMi's shape, or does not line up with the pod's containers."""


def replica_gpu(device_id: str) -> Optional[str]:
    """The GPU a HAMi replica's device ID names ("GPU-<uuid>-3" → "GPU-<uuid>"); None for other forms."""
    match = _REPLICA.fullmatch(device_id)
    return match.group(1) if match else None


def assignment(annotations: Optional[dict], init_containers: Sequence[str],
               containers: Sequence[str]) -> Optional[Assignment]:
    """The assignment a bound pod's annotations record, by container name; None when there is none to follow
    (no annotation, or not bound yet). Raises MalformedAnnotation when it cannot be read."""
    annotations = annotations if isinstance(annotations, dict) else {}
    value = annotations.get(ALLOCATED_ANNOTATION)
    if value is None or annotations.get(BIND_PHASE_ANNOTATION) != BOUND:
        return None
    if not isinstance(value, str):
        raise MalformedAnnotation("not a string")
    entries = parse_allocated(value)
    # Which containers the entries stand for: the count tells HAMi's two layouts apart.
    if len(entries) == len(init_containers) + len(containers):
        names = list(init_containers) + list(containers)
    elif len(entries) == len(containers):
        names = list(containers)
    else:
        raise MalformedAnnotation(f"{len(entries)} container entries for {len(containers)} containers "
                                  f"and {len(init_containers)} init containers")
    return {name: devices for name, devices in zip(names, entries) if devices}


def parse_allocated(value: str) -> Tuple[Tuple[HamiDevice, ...], ...]:
    """Each container's devices, in the annotation's order. Raises MalformedAnnotation."""
    if not value.endswith(";"):
        raise MalformedAnnotation("does not end with ';'")
    return tuple(_container_devices(part) for part in value[:-1].split(";"))


def _container_devices(part: str) -> Tuple[HamiDevice, ...]:
    if not part:
        return ()
    if not part.endswith(":"):
        raise MalformedAnnotation(f"container entry {part[:80]!r} does not end with ':'")
    return tuple(_device(entry) for entry in part[:-1].split(":"))


def _device(entry: str) -> HamiDevice:
    fields = entry.split(",")
    if len(fields) != 4 or not all(_ID.fullmatch(field) for field in fields[:2]) or not all(
            _NUMBER.fullmatch(field) for field in fields[2:]):
        raise MalformedAnnotation(f"device entry {entry[:80]!r} is not UUID,TYPE,MiB,cores")
    cores = int(fields[3])
    if cores > 100:
        raise MalformedAnnotation(f"device entry {entry[:80]!r} gives more than 100% of the cores")
    return HamiDevice(fields[0], int(fields[2]), cores)


def share_of(memory_mib: int, cores_percent: int, gpu_memory_mib: Optional[float]) -> Optional[float]:
    """The GPUs one HAMi device stands for: its cores share, or its memory share when cores is 0 (None when the
    GPU's memory is not known)."""
    if cores_percent:
        return cores_percent / 100
    if not gpu_memory_mib:
        return None
    return min(memory_mib / gpu_memory_mib, 1.0)


def follow(devices: Iterable, assignments: Dict[Tuple[str, str], Assignment]) -> Dict[tuple, HamiDevice]:
    """(namespace, pod, container, device ID) → the HamiDevice a kubelet replica really stands for.

    A container's replicas (sorted by ID: the kubelet's order says nothing) are paired with its annotation
    devices in order; a container whose replica count differs from its annotation's is not followed."""
    replicas: Dict[Tuple[str, str, str], set] = {}
    for device in devices:
        if not device.dra and replica_gpu(device.device_id):
            replicas.setdefault((device.namespace, device.pod, device.container), set()).add(device.device_id)
    followed: Dict[tuple, HamiDevice] = {}
    for (namespace, pod, container), ids in replicas.items():
        devices_given = assignments.get((namespace, pod), {}).get(container, ())
        if len(devices_given) == len(ids):
            for device_id, given in zip(sorted(ids), devices_given):
                followed[(namespace, pod, container, device_id)] = given
    return followed
