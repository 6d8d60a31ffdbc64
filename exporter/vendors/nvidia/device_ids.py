"""NVIDIA's device forms: its kubelet resource names, device-ID forms and DRA driver, turned into keys that dcgm-exporter samples carry."""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Tuple

from exporter.core.hami import replica_gpu
from exporter.core.identity import GpuKey, MigResolver
from exporter.vendors.nvidia.mig_shares import mig_profile_of, replica_of, whole_device_share

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
# NVIDIA's DRA driver from 25.12: gpu-<minor>-mig-<profile, dots dropped>-<GPU instance profile ID>-<placement
# start>. Its profile part holds a letter ("1g10gb"), which tells it from the earlier all-digit form
# gpu-<minor>-mig-<profile ID>-<start>-<size>.
_DRA_MIG_PLACEMENT = re.compile(r"gpu-\d+-mig-([0-9a-z-]*[a-z][0-9a-z-]*)-(\d+)-(\d+)")


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
    # A HAMi replica "GPU-<uuid>-<n>" names its GPU as the kubelet picked it; with the API, the pod's HAMi
    # annotation says which GPU the container really got (core.hami).
    device_id = replica_gpu(device_id) or device_id
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


def dra_mig_placement(device_name: str) -> Optional[Tuple[int, int]]:
    """(GPU instance profile ID, placement start) that a DRA MIG device's name (driver 25.12 and later)
    gives, else None. With its parent GPU they name one GPU instance: a dynamic MIG device, made when its
    claim is prepared, publishes no UUID to find it by."""
    match = _DRA_MIG_PLACEMENT.fullmatch(device_name)
    return (int(match.group(2)), int(match.group(3))) if match else None


class NvidiaDeviceForms:
    """NVIDIA's answers to what the core asks of a vendor's devices (core.device_ids.DeviceForms)."""

    dra_driver = DRA_GPU_DRIVER
    samples = "dcgm samples"
    slices_name_devices = True  # its ResourceSlices publish each device's UUID

    def is_gpu_device(self, resource: str, device_id: str, dra: bool = False) -> bool:
        return is_gpu_device(resource, device_id, dra)

    def key_for_device(self, device_id: str, dra: bool = False,
                       resolve_mig: Optional[MigResolver] = None) -> Optional[GpuKey]:
        return key_for_device(device_id, dra, resolve_mig)

    def replica_of(self, device_id: str) -> Optional[str]:
        return replica_of(device_id)

    def partition_profile(self, resource: str) -> str:
        return mig_profile_of(resource)

    def whole_device_share(self, resource: str, device_id: str, dra: bool, profile: str,
                           node_profiles: Iterable[str]) -> Optional[float]:
        return whole_device_share(resource, device_id, dra, profile, node_profiles)

    def dra_partition_placement(self, device_name: str) -> Optional[Tuple[int, int]]:
        return dra_mig_placement(device_name)

    def driver_health(self, keys: Iterable[GpuKey], resolve_mig: Optional[MigResolver] = None) -> Dict[GpuKey, str]:
        return {}  # NVIDIA's health comes from the pods' status alone


DEVICE_FORMS = NvidiaDeviceForms()
