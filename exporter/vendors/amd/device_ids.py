"""AMD's kubelet resources and device-ID forms: which allocations are AMD GPUs, and which device each ID names.

Facts from ROCm/k8s-device-plugin (`GetAMDGPUs` in internal/pkg/amdgpu/amdgpu.go, `getResourceList` in
cmd/k8s-device-plugin/main.go) and ROCm/k8s-gpu-dra-driver (`CanonicalName` in cmd/gpu-kubeletplugin/deviceinfo.go).
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

RESOURCE_DOMAIN = "amd.com"
# `--resource_naming_strategy single` (the default): whole GPUs and partitions alike.
GPU_RESOURCE = "amd.com/gpu"
DRA_DRIVER = "gpu.amd.com"
# `mixed` naming: `amd.com/<compute>_<memory>`, the lower-cased contents of the GPU's sysfs files
# current_compute_partition and current_memory_partition joined by "_". The modes are amdsmi's
# (GPUComputePartitionType / GPUMemoryPartitionType in ROCm/device-metrics-exporter pkg/amdgpu/proto/gpu.proto).
COMPUTE_PARTITION_MODES = ("spx", "dpx", "tpx", "qpx", "cpx")
MEMORY_PARTITION_MODES = ("nps1", "nps2", "nps4", "nps8")
_PROFILE_RESOURCE = re.compile(
    r"amd\.com/(?:%s)_(?:%s)" % ("|".join(COMPUTE_PARTITION_MODES), "|".join(MEMORY_PARTITION_MODES)))

# The device plugin's IDs are sysfs folder names: /sys/module/amdgpu/drivers/pci:amdgpu/<domain:bus:device.function>
# for a whole GPU (or a partitioned GPU's first partition), /sys/devices/platform/amdgpu_xcp_<N> for each further
# partition; some kernels spell the latter amdgpu_xcp.<N>.
_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_PARTITION = re.compile(r"amdgpu_xcp[_.](\d+)")
_DRA_DEVICE = re.compile(r"gpu-(\d+)-(\d+)")

PCI = "pci"              # a PCI address, lower case: a whole GPU, or a partitioned GPU's first partition
PARTITION = "partition"  # amdgpu_xcp_<N>: a further partition of a partitioned GPU
DRA = "dra"              # gpu-<card>-<render>: the DRA driver's device, whole GPU or partition


class DeviceRef(NamedTuple):
    """One AMD device as the kubelet names it, in one spelling per device."""

    form: str  # PCI, PARTITION or DRA
    name: str  # "0000:19:00.0", "amdgpu_xcp_3", "gpu-1-129"


def is_gpu_resource(resource: str) -> bool:
    """Whether a device-plugin resource is an AMD GPU: `amd.com/gpu` or a partition profile such as
    `amd.com/cpx_nps4`. Other `amd.com/*` resources (AMD's NICs) are not GPUs."""
    return resource == GPU_RESOURCE or _PROFILE_RESOURCE.fullmatch(resource) is not None


def is_gpu_device(resource: str, dra: bool = False) -> bool:
    """Whether an allocation is an AMD GPU: a GPU resource of the device plugin, or any device of AMD's DRA
    driver (`resource` is then the driver's name)."""
    return resource == DRA_DRIVER if dra else is_gpu_resource(resource)


def parse_device_id(device_id: str, dra: bool = False) -> Optional[DeviceRef]:
    """The device an ID names, or None for a form AMD's plugins do not write (counted unresolved, never guessed)."""
    if dra:
        return DeviceRef(DRA, device_id) if _DRA_DEVICE.fullmatch(device_id) else None
    if _PCI_ADDRESS.fullmatch(device_id):
        return DeviceRef(PCI, device_id.lower())
    match = _PARTITION.fullmatch(device_id)
    if match:
        return DeviceRef(PARTITION, partition_name(match.group(1)))
    return None


def partition_name(number: str) -> str:
    """The one spelling of a partition's ID, whichever the kernel gave its folder: amdgpu_xcp_<N>."""
    return f"amdgpu_xcp_{number}"


def dra_indices(name: str) -> Optional[Tuple[int, int]]:
    """(card, render minor) of a DRA device name `gpu-<card>-<render>`, or None for another name."""
    match = _DRA_DEVICE.fullmatch(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def normalise_pci_address(address: str) -> Optional[str]:
    """A PCI address `dddd:bb:dd.f` in lower case, or None when `address` is not one."""
    return address.lower() if _PCI_ADDRESS.fullmatch(address) else None
