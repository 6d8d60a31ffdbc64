"""Device-ID forms reported by the kubelet, turned into keys that dcgm-exporter samples carry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Optional, Protocol, Tuple


class Owner(NamedTuple):
    """Who holds a device. The kubelet reports no UIDs, so names are the identity."""

    namespace: str
    pod: str
    container: str


class GpuKey(NamedTuple):
    """The label a matching sample must carry, and its GPU instance ("" for a whole GPU)."""

    label: str  # "UUID", "gpu" or "device"
    value: str
    instance: str  # the GPU_I_ID of a MIG instance, "" for the whole GPU


# Resolves a "MIG-<uuid>" device ID to (parent "GPU-<uuid>", GPU instance ID), or None when unknown.
# Called while building a Mapping (on the refresher, never on a scrape); it must not raise.
MigResolver = Callable[[str], Optional[Tuple[str, str]]]

DRA_GPU_DRIVER = "gpu.nvidia.com"

# Resource names of NVIDIA's device plugin (gpu, gpu.shared, mig-1g.10gb, mig-1g.10gb.shared) and GKE's.
_GPU_RESOURCE = re.compile(r"nvidia\.com/(?:gpu|gpu\..+|mig-.+)")
_SHARED_REPLICA = re.compile(r"::\d+$")  # time-slicing / MPS replicas: "GPU-…::3"
_INDEX = re.compile(r"\d+")
_GKE_DEVICE = re.compile(r"nvidia(\d+)(?:/vgpu\d+)?")  # GKE: whole GPU or a time-shared slice of it
_GKE_MIG = re.compile(r"nvidia(\d+)/gi(\d+)(?:/vgpu\d+)?")  # GKE MIG partition, time-shared or not
_MIG_GPU_FORM = re.compile(r"MIG-(GPU-[0-9A-Za-z-]+)/(\d+)/\d+")  # MIG-GPU-<uuid>/<gi>/<ci>, old drivers
_MIG_UUID_FORM = re.compile(r"MIG-[0-9A-Fa-f]{8}-[0-9A-Za-z-]+")  # R470+ MIG UUIDs
_DRA_GPU = re.compile(r"gpu-(\d+)")


def is_gpu_device(resource: str, device_id: str, dra: bool = False) -> bool:
    """Whether an allocated device is a GPU (or a share or partition of one) that dcgm-exporter reports.

    NVIDIA's GPU resource names count with any device ID. Other nvidia.com/* names count only with a
    GPU-/MIG- device ID: they are either GPU resources renamed in the device plugin's config, or NVIDIA
    network devices — the network operator's RDMA shared device plugin hands out "0", "1", … under
    nvidia.com/rdma_shared_device_*, which must never be taken for GPU indices.
    """
    if dra:
        return resource == DRA_GPU_DRIVER
    if _GPU_RESOURCE.fullmatch(resource):
        return True
    return resource.startswith("nvidia.com/") and device_id.startswith(("GPU-", "MIG-"))


def key_for_device(device_id: str, dra: bool = False, resolve_mig: MigResolver | None = None) -> GpuKey | None:
    """Return the key samples of this device carry, or None when it cannot be resolved without guessing.

    Unresolved without NVML: "MIG-<uuid>" (R470+ drivers); always: the device plugin's MIG index form
    "<gpu>:<mig index>" (a MIG index is not a GPU instance ID) and DRA MIG devices.
    """
    if dra:
        return _key_for_dra_device(device_id)
    device_id = _SHARED_REPLICA.sub("", device_id)
    if device_id.startswith("GPU-"):
        return GpuKey("UUID", device_id, "")
    if _INDEX.fullmatch(device_id):
        return GpuKey("gpu", device_id, "")
    match = _GKE_DEVICE.fullmatch(device_id)
    if match:
        return GpuKey("device", "nvidia" + match.group(1), "")
    match = _GKE_MIG.fullmatch(device_id)
    if match:
        return GpuKey("gpu", match.group(1), match.group(2))
    match = _MIG_GPU_FORM.fullmatch(device_id)
    if match:
        return GpuKey("UUID", match.group(1), match.group(2))
    if _MIG_UUID_FORM.fullmatch(device_id) and resolve_mig is not None:
        parent = resolve_mig(device_id)
        if parent is not None:
            return GpuKey("UUID", parent[0], parent[1])
    return None


def _key_for_dra_device(device_name: str) -> GpuKey | None:
    # NVIDIA's DRA driver names whole GPUs "gpu-<minor>"; the minor is the N of /dev/nvidiaN, which
    # dcgm-exporter reports as device="nvidiaN". MIG devices ("gpu-<minor>-mig-…") do not name their
    # GPU instance ID, so they are reported as unresolved rather than guessed.
    match = _DRA_GPU.fullmatch(device_name)
    if match:
        return GpuKey("device", "nvidia" + match.group(1), "")
    return None


class DeviceLike(Protocol):
    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    dra: bool


# With the Kubernetes API: a DRA device's resolution from its ResourceSlice and claim (an object with
# `admin_access` and `key`, or `key` None to keep the kubelet-only rule). See exporter.kube_dra.
DraResolver = Callable[[object], object]


class Allocation(NamedTuple):
    """One allocated GPU device and the key it resolved to (None when unresolved)."""

    owner: Owner
    resource: str
    device_id: str
    key: Optional[GpuKey]


@dataclass(frozen=True)
class Mapping:
    """Which owners hold each GPU key, as of one successful kubelet List."""

    owners: dict = field(default_factory=dict)  # GpuKey -> tuple[Owner, ...], sorted, distinct
    allocations: Tuple[Allocation, ...] = ()
    unresolved: Tuple[str, ...] = ()  # device IDs that no sample can be matched to
    # (namespace, pod) → `,name="value"…` appended after the owner labels (--labels.*, from the
    # Kubernetes API); empty without it, so the output is the kubelet-only one.
    extra_labels: dict = field(default_factory=dict)

    def owners_for(self, key: GpuKey) -> tuple:
        return self.owners.get(key, ())


EMPTY_MAPPING = Mapping()


def build_mapping(devices: Iterable[DeviceLike], resolve_mig: MigResolver | None = None,
                  resolve_dra: DraResolver | None = None) -> Mapping:
    """Group the GPU devices of a List answer by key; replicas of one container collapse into one owner.

    A DRA device held through an adminAccess claim (a monitoring pod) is left out altogether.
    """
    owner_sets: dict = {}
    allocations: dict = {}  # keyed so that a replica listed twice gives one allocation
    unresolved: set = set()
    for device in devices:
        if not is_gpu_device(device.resource, device.device_id, device.dra):
            continue
        owner = Owner(device.namespace, device.pod, device.container)
        key = _device_key(device, resolve_mig, resolve_dra)
        if key is _NOT_AN_OWNER:
            continue
        allocations[(owner, device.resource, device.device_id)] = Allocation(
            owner, device.resource, device.device_id, key
        )
        if key is None:
            unresolved.add(device.device_id)
        else:
            owner_sets.setdefault(key, set()).add(owner)
    return Mapping(
        owners={key: tuple(sorted(owners)) for key, owners in owner_sets.items()},
        allocations=tuple(sorted(allocations.values(), key=_allocation_order)),
        unresolved=tuple(sorted(unresolved)),
    )


_NOT_AN_OWNER = object()


def _device_key(device: DeviceLike, resolve_mig: MigResolver | None, resolve_dra: DraResolver | None):
    if device.dra and resolve_dra is not None:
        resolution = resolve_dra(device)
        if resolution.admin_access:
            return _NOT_AN_OWNER
        if resolution.known:  # a ResourceSlice describes it: its answer, even None, beats the name rule
            return resolution.key
    return key_for_device(device.device_id, device.dra, resolve_mig)


def _allocation_order(allocation: Allocation) -> tuple:
    return (allocation.owner, allocation.resource, allocation.device_id)


def sample_keys(uuid: str, gpu: str, device: str, instance: str) -> tuple:
    """The keys a sample with these label values can be claimed by (empty values claim nothing)."""
    keys = []
    if uuid:
        keys.append(GpuKey("UUID", uuid, instance))
    if gpu:
        keys.append(GpuKey("gpu", gpu, instance))
    if device:
        keys.append(GpuKey("device", device, instance))
    return tuple(keys)
