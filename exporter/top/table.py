"""The table model: one row per container that holds a GPU, and the footers, from one source's Readings (pure)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from exporter.top import families as f
from exporter.top.readings import CLUSTER, Readings, Sample
from exporter.top.utilization import device_busy, is_share, own_share, whole_devices_busy
from exporter.vendors.amd.dialect import is_partitioned

MIB = 1 << 20
# Worst first: a container's health is that of its worst GPU.
HEALTH_ORDER = ("lost", "unhealthy", "unknown", "healthy")
PROCESS, DEVICE = "process", "device"  # where sm_ratio and memory_bytes come from
# The cluster first: two clusters' nodes, pods and GPUs may bear the same names and are never one.
Owner = Tuple[str, str, str, str, str]  # cluster ("" where unknown), node, namespace, pod, container
# cluster, node, UUID (or "" where unknown), gpu, GPU_I_ID; an AMD device: "", its gpu_id marked as AMD's (each
# partition has its own), "".
Device = Tuple[str, str, str, str, str]
_AMD_GPU = "gpu_id="  # the mark: an AMD gpu_id is never taken for an NVIDIA gpu index of the same node
# Device IDs AMD's device plugin gives a partition other than a GPU's first (some kernels write `amdgpu_xcp.N`).
_AMD_PARTITION_ID = re.compile(r"amdgpu_xcp[._][0-9]+")


@dataclass
class Row:
    namespace: Optional[str]
    pod: Optional[str]
    container: Optional[str]
    node: Optional[str]
    gpus: Optional[float] = None
    sm_ratio: Optional[float] = None  # GPUs' worth of SM time: the sum over its GPUs of its share of each
    memory_bytes: Optional[float] = None
    power_watts: Optional[float] = None
    idle_ratio: Optional[float] = None  # of the time it held its GPUs, the part with none of its processes on them
    health: Optional[str] = None
    cluster_queue: Optional[str] = None
    local_queue: Optional[str] = None
    sm_source: Optional[str] = None  # process: its own share; device: its GPUs' utilisation, shared with co-holders
    containers: int = 1
    pod_labels: Dict[str, str] = field(default_factory=dict, repr=False)
    cluster: Optional[str] = None  # where the series carry one (--cluster-label), or the pod proxy's context
    utilization: Optional[float] = None  # busy fraction (0-1) of the GPUs it holds: see utilization.py
    vendor: Optional[str] = None  # the GPU vendor its node's exporter serves (nvidia, amd); None where not said
    # POWER or IDLE unknown for want of data, not because the exporter does not serve them: a counter of
    # its seen with fewer than two samples in the window so far.
    rates_pending: bool = False


@dataclass
class Unallocated:
    namespace: str
    pod: str
    container: str
    node: str
    memory_bytes: Optional[float] = None
    sm_ratio: Optional[float] = None
    cluster: Optional[str] = None


@dataclass
class Unattributed:
    node: str
    reason: str
    memory_bytes: Optional[float] = None
    sm_ratio: Optional[float] = None
    power_watts: Optional[float] = None
    cluster: Optional[str] = None


class Unreachable(NamedTuple):
    """A node whose exporter did not answer, or a whole cluster (node empty: a context that failed)."""
    node: str
    error: str
    cluster: Optional[str] = None


@dataclass
class Table:
    rows: List[Row]
    unallocated: List[Unallocated]
    unattributed: List[Unattributed]
    unreachable: List[Unreachable]


def build_table(readings: Readings) -> Table:
    """Every holder's row; the use outside allocations; what nobody holds, by node and reason."""
    rows = {owner: _holder_row(owner, sample) for owner, sample in _by_owner(readings.samples(f.ALLOCATED)).items()}
    devices = _held_devices(readings)
    _add_process_shares(rows, readings)
    _add_device_readings(rows, devices, readings)
    health = _device_health(readings)
    for owner, row in rows.items():
        statuses = [health[d] for d in devices.get(owner, ()) if d in health]
        row.health = min(statuses, key=HEALTH_ORDER.index) if statuses else None
    add_utilization(rows, devices, readings)
    _mark_rates_pending(rows, readings)
    vendors = _node_vendors(readings)
    for owner, row in rows.items():
        row.vendor = vendors.get(owner[:2])
    unreachable = sorted((Unreachable(*entry) for entry in readings.unreachable),
                         key=lambda u: (u.cluster or "", u.node, u.error))
    return Table(list(rows.values()), _unallocated(readings), _unattributed(readings), unreachable)


def _node_vendors(readings: Readings) -> Dict[Tuple[str, str], str]:
    """(cluster, node) → the GPU vendor its exporter serves: its vendor_info gauge; an exporter older than that
    gauge that serves dcgm_up served NVIDIA alone (as the recording rules read it)."""
    where = lambda labels: (labels.get(CLUSTER, ""), labels.get("node", ""))  # noqa: E731
    vendors = {where(s.labels): "nvidia" for s in readings.samples(f.PRESENCE[0])}
    vendors.update({where(s.labels): s.labels["vendor"] for s in readings.samples(f.VENDOR_INFO)
                    if s.value and s.labels.get("vendor")})
    return vendors


def owner_of(labels: Dict[str, str]) -> Owner:
    return (labels.get(CLUSTER, ""), labels.get("node", ""), labels.get("namespace", ""), labels.get("pod", ""),
            labels.get("container", ""))


def device_of(labels: Dict[str, str]) -> Device:
    if labels.get("gpu_id"):
        return (labels.get(CLUSTER, ""), labels.get("node", ""), "", _AMD_GPU + labels["gpu_id"], "")
    return (labels.get(CLUSTER, ""), labels.get("node", ""), labels.get("UUID", ""), labels.get("gpu", ""),
            labels.get("GPU_I_ID", ""))


def _samples_of(readings: Readings, names: Tuple[str, ...]) -> List[Sample]:
    """One figure's samples under each of its names (AMD's, with and without its `amd_` prefix)."""
    return [sample for name in names for sample in readings.samples(name)]


def _partitioned_amd_devices(readings: Readings) -> set:
    """AMD devices that are one partition of a split GPU, from AMD's samples (their partition type) and from
    the device IDs the kubelet gives partitions: their GPU's activity and power are no one holder's."""
    found = {device_of(s.labels) for s in _samples_of(readings, f.AMD_VRAM_USED + f.AMD_ACTIVITY + f.AMD_POWER)
             if s.labels.get("gpu_id") and is_partitioned(s.labels)}
    return found | {device_of(s.labels) for s in readings.samples(f.ALLOCATION)
                    if s.labels.get("gpu_id") and _AMD_PARTITION_ID.fullmatch(s.labels.get("device_id", ""))}


def _whole_amd(samples: List[Sample], partitioned: set, scale: float) -> Dict[Device, float]:
    """An AMD figure per device, of whole GPUs only (a partitioned GPU's is the whole GPU's, on partition 0)."""
    return {device: value for device, value in _per_device(samples, scale).items() if device not in partitioned}


def _by_owner(samples: List[Sample]) -> Dict[Owner, Sample]:
    return {owner_of(sample.labels): sample for sample in samples if sample.labels.get("pod")}


def _holder_row(owner: Owner, sample: Sample) -> Row:
    labels = sample.labels
    pod_labels = {key[len("label_"):]: value for key, value in labels.items() if key.startswith("label_")}
    return Row(owner[2], owner[3], owner[4], owner[1], gpus=sample.value,
               cluster_queue=labels.get("cluster_queue") or None, local_queue=labels.get("local_queue") or None,
               pod_labels=pod_labels, cluster=owner[0] or None)


def _held_devices(readings: Readings) -> Dict[Owner, List[Device]]:
    held: Dict[Owner, List[Device]] = defaultdict(list)
    for sample in readings.samples(f.ALLOCATION):
        device = device_of(sample.labels)
        if device not in held[owner_of(sample.labels)]:
            held[owner_of(sample.labels)].append(device)
    return held


def _sums(samples: List[Sample]) -> Dict[Owner, float]:
    totals: Dict[Owner, float] = defaultdict(float)
    for sample in samples:
        totals[owner_of(sample.labels)] += sample.value
    return totals


def _add_process_shares(rows: Dict[Owner, Row], readings: Readings) -> None:
    """--sharing.mode process: the container's own SM share, memory, energy rate and idle time."""
    sm, memory, power = (_sums(readings.samples(name)) for name in (f.SM, f.MEMORY, f.ENERGY))
    idle: Dict[Owner, List[float]] = defaultdict(list)
    for sample in readings.samples(f.IDLE):
        idle[owner_of(sample.labels)].append(min(max(sample.value, 0.0), 1.0))
    for owner, row in rows.items():
        if owner in sm:
            row.sm_ratio, row.sm_source = sm[owner], PROCESS
        row.memory_bytes = memory.get(owner)
        row.power_watts = power.get(owner)
        row.idle_ratio = sum(idle[owner]) / len(idle[owner]) if idle.get(owner) else None


def _mark_rates_pending(rows: Dict[Owner, Row], readings: Readings) -> None:
    """Rows whose POWER or IDLE is unknown while a counter of theirs is there, short of samples."""
    waiting = {owner_of(labels) for family, labels in readings.unrated if family in (f.ENERGY, f.IDLE)}
    for owner in waiting & rows.keys():
        row = rows[owner]
        row.rates_pending = row.power_watts is None or row.idle_ratio is None


def _add_device_readings(rows: Dict[Owner, Row], devices: Dict[Owner, List[Device]], readings: Readings) -> None:
    """--sharing.mode device: a holder without its own share gets its GPUs' utilisation and memory, marked
    `device` (on a shared GPU, every holder's row shows the same GPU)."""
    activity = _per_device(readings.samples(f.DEVICE_ACTIVE), 1.0)
    if not activity:
        activity = _per_device(readings.samples(f.DEVICE_UTIL), 0.01)
    # AMD: activity and power of whole GPUs; memory of every device (each partition has its own).
    partitioned = _partitioned_amd_devices(readings)
    activity.update(_whole_amd(_samples_of(readings, f.AMD_ACTIVITY), partitioned, 0.01))
    power = _whole_amd(_samples_of(readings, f.AMD_POWER), partitioned, 1.0)
    framebuffer = _per_device(readings.samples(f.DEVICE_FB_USED), MIB)
    framebuffer.update(_per_device(_samples_of(readings, f.AMD_VRAM_USED), MIB))
    for owner, row in rows.items():
        if row.sm_source == PROCESS:
            continue
        held = [_matching(device, activity) for device in devices.get(owner, ())]
        if any(value is not None for value in held):
            row.sm_ratio, row.sm_source = sum(value for value in held if value is not None), DEVICE
        if row.memory_bytes is None:
            row.memory_bytes = _held_sum(devices.get(owner, ()), framebuffer)
        if row.power_watts is None:
            row.power_watts = _held_sum(devices.get(owner, ()), power)


def _held_sum(held, values: Dict[Device, float]) -> Optional[float]:
    """The sum of a figure over the devices held that report it; None where none does."""
    found = [value for value in (_matching(device, values) for device in held) if value is not None]
    return sum(found) if found else None


def add_utilization(rows: Dict[Owner, Row], devices: Dict[Owner, List[Device]], readings: Readings) -> None:
    """UTIL (utilization.py), the pod's, on each of its containers' rows: its own share where it has one,
    else its devices' utilisation where it holds each of them whole."""
    gpu_util = {device_of(s.labels): s.value for s in readings.samples(f.DEVICE_UTIL) if not s.labels.get("GPU_I_ID")}
    # AMD's gfx activity (%) of whole GPUs reads as GPU_UTIL does; a partition holder has none of its own.
    partitioned = _partitioned_amd_devices(readings)
    gpu_util.update(_whole_amd(_samples_of(readings, f.AMD_ACTIVITY), partitioned, 1.0))
    engine_active = _per_device(readings.samples(f.DEVICE_ACTIVE), 1.0)
    shared = _shared_devices(readings) | partitioned
    pods: Dict[Tuple[str, str, str], List[Owner]] = defaultdict(list)
    for owner in rows:
        pods[(owner[0], owner[2], owner[3])].append(owner)
    for owners in pods.values():
        members = [rows[owner] for owner in owners]
        own = [row.sm_ratio for row in members if row.sm_source == PROCESS]
        value = own_share(sum(own), sum(row.gpus or 0.0 for row in members)) if own else None
        if value is None:
            held = list(dict.fromkeys(device for owner in owners for device in devices.get(owner, ())))
            value = None if any(device in shared for device in held) else whole_devices_busy(
                [_busy(device, gpu_util, engine_active) for device in held])
        for row in members:
            row.utilization = value


def _busy(device: Device, gpu_util: Dict[Device, float], engine_active: Dict[Device, float]) -> Optional[float]:
    """One device's utilisation; each lookup only where it can answer (a MIG instance has no GPU_UTIL), since
    a lookup that misses walks every device of the cluster."""
    percent = None if device[4] else _matching(device, gpu_util)
    busy = device_busy(percent, None)
    return busy if busy is not None else _matching(device, engine_active)


def _shared_devices(readings: Readings) -> set:
    """Devices held by more than one pod, or through a replica (several containers of one pod holding a
    GPU are one holder)."""
    pods: Dict[Device, set] = defaultdict(set)
    shared = set()
    for sample in readings.samples(f.ALLOCATION):
        device = device_of(sample.labels)
        pods[device].add(owner_of(sample.labels)[:4])
        if is_share(sample.labels.get("device_id", "")):
            shared.add(device)
    return shared | {device for device, holders in pods.items() if len(holders) > 1}


def _per_device(samples: List[Sample], scale: float) -> Dict[Device, float]:
    """One value per device: in --labels.mode samples a shared GPU's sample comes once per holder."""
    return {device_of(sample.labels): sample.value * scale for sample in samples}


def _matching(device: Device, values: Dict[Device, float]) -> Optional[float]:
    if device in values:
        return values[device]
    cluster, node, uuid, gpu, instance = device
    for (other_cluster, other_node, other_uuid, other_gpu, other_instance), value in values.items():
        same_gpu = (uuid and uuid == other_uuid) or (not uuid and gpu == other_gpu)
        if (other_cluster, other_node) == (cluster, node) and same_gpu and other_instance == instance:
            return value
    return None


def _device_health(readings: Readings) -> Dict[Device, str]:
    """Device → its status; a GPU NVML reports lost is `lost`, whatever its holders' pod status says."""
    health = {device_of(s.labels): s.labels.get("status", "unknown") for s in readings.samples(f.HEALTH) if s.value}
    lost = [device_of(s.labels) for s in readings.samples(f.LOST) if s.value]
    for device in list(health):
        if any(device[:2] == gone[:2] and (device[2] == gone[2] if gone[2] else device[3] == gone[3]) for gone in lost):
            health[device] = "lost"
    return {device: status if status in HEALTH_ORDER else "unknown" for device, status in health.items()}


def _unallocated(readings: Readings) -> List[Unallocated]:
    memory, sm = _sums(readings.samples(f.UNALLOCATED_MEMORY)), _sums(readings.samples(f.UNALLOCATED_SM))
    return [Unallocated(owner[2], owner[3], owner[4], owner[1], memory.get(owner), sm.get(owner), owner[0] or None)
            for owner in sorted(set(memory) | set(sm))]


def _unattributed(readings: Readings) -> List[Unattributed]:
    """What nobody holds, by node and reason; reasons with nothing in them are left out."""
    entries: Dict[Tuple[str, str, str], Unattributed] = {}
    for family, attribute in ((f.UNATTRIBUTED_MEMORY, "memory_bytes"), (f.UNATTRIBUTED_SM, "sm_ratio"),
                              (f.UNATTRIBUTED_ENERGY, "power_watts")):
        for sample in readings.samples(family):
            key = (sample.labels.get("node", ""), sample.labels.get("reason", ""), sample.labels.get(CLUSTER, ""))
            entry = entries.setdefault(key, Unattributed(key[0], key[1], cluster=key[2] or None))
            setattr(entry, attribute, (getattr(entry, attribute) or 0.0) + sample.value)
    used = [entry for entry in entries.values()
            if any(value for value in (entry.memory_bytes, entry.sm_ratio, entry.power_watts))]
    return sorted(used, key=lambda entry: (entry.cluster or "", entry.node, entry.reason))
