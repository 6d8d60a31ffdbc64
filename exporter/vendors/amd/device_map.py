"""A kubelet's AMD device, met with the GPU the AMD exporter's samples name: device ID → sysfs → identity service.

The AMD exporter labels each sample with `gpu_id` (amdsmi's index; a partition is a GPU of its own) and no PCI
address; its identity service pairs each `gpu_id` with the GPU's or partition's PCI address (`Device`). The
kubelet names a device by a PCI address, an amdgpu_xcp folder or a DRA device; sysfs turns the last two into the
partition's own PCI address. Pure: it takes what the readers found and returns the join.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from exporter.vendors.amd.device_ids import DRA, PCI, DeviceRef, normalise_pci_address
from exporter.vendors.amd.identity import IdentitySnapshot
from exporter.vendors.amd.sysfs_layout import AmdDevice, SysfsLayout

# Why a device is not attributed; counted, never guessed around.
NO_IDENTITY = "no_identity"          # the identity service has not answered (or its answer is too old)
NOT_IN_SYSFS = "not_in_sysfs"        # a partition or DRA device sysfs does not show in use
NOT_LISTED = "not_listed"            # the identity service lists no GPU at the device's address
SLICE_DISAGREES = "slice_disagrees"  # the ResourceSlice's pciAddr and sysfs name different GPUs


class AmdGpu(NamedTuple):
    """The GPU or partition a device is, as the AMD exporter's samples and identity service name it."""

    gpu_id: str
    gpu_uuid: str      # "" where the service gives none
    pci_address: str
    partitioned: bool  # one partition of a GPU split in several (compute mode other than spx)
    # The first partition of a partitioned GPU: the AMD exporter serves the whole GPU's activity, power and
    # energy on it, which belong to none of the partitions' holders.
    carries_device_figures: bool


class Resolution(NamedTuple):
    gpu: Optional[AmdGpu]
    unresolved: str = ""  # one of the reasons above when gpu is None
    # How many partitions the device's GPU is split into as sysfs shows it in use (1: a whole GPU); 0 where
    # sysfs does not show the device, so that its share of its GPU is not known from here.
    parts: int = 0


def resolve(ref: DeviceRef, layout: SysfsLayout, identity: IdentitySnapshot,
            slice_pci_address: str = "", slice_parent_address: str = "") -> Resolution:
    """The GPU `ref` names. `slice_pci_address` is a whole GPU's `pciAddr` from its ResourceSlice, when the
    Kubernetes API is read; `slice_parent_address` a partition's `parentPciAddr`, which names only its GPU: a
    partition is always met through sysfs, and only checked against it."""
    if not identity.known:
        return Resolution(None, NO_IDENTITY)
    device = _sysfs_device(ref, layout)
    address = ref.name if ref.form == PCI else (device.pci_address if device else "")
    slice_address = normalise_pci_address(slice_pci_address) if slice_pci_address else None
    if slice_address:
        if address and address != slice_address:
            return Resolution(None, SLICE_DISAGREES)
        address = slice_address
    parent_address = normalise_pci_address(slice_parent_address) if slice_parent_address else None
    if parent_address and device is not None and device.parent_address != parent_address:
        return Resolution(None, SLICE_DISAGREES)
    if not address:
        return Resolution(None, NOT_IN_SYSFS)
    state = identity.by_address.get(address)
    if state is None:
        return Resolution(None, NOT_LISTED)
    partitioned = device is not None and device.compute_partition not in ("", "spx")
    first = partitioned and device is not None and device.pci_address == device.parent_address
    parts = layout.parts_of(device.parent_address) if device is not None else 0
    return Resolution(AmdGpu(state.gpu_id, state.uuid, address, partitioned, first), parts=parts)


def _sysfs_device(ref: DeviceRef, layout: SysfsLayout) -> Optional[AmdDevice]:
    if ref.form == DRA:
        return layout.by_dra_name.get(ref.name)
    return layout.by_device_id.get(ref.name)
