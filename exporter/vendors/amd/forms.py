"""AMD's device forms: which kubelet allocations are AMD GPUs, and the gpu_id each names, through sysfs and the identity service."""

from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional, Tuple

from exporter.core.device_ids import DeviceResolution
from exporter.core.identity import GpuKey
from exporter.vendors.amd.device_ids import DRA_DRIVER, is_gpu_device, parse_device_id
from exporter.vendors.amd.device_map import NO_IDENTITY
from exporter.vendors.amd.resolver import AmdResolver

# What one device of a partition-profile resource (`amd.com/<compute>_<memory>`) counts for where sysfs does not
# show its GPU: its GPU split by its compute mode. CPX makes one partition per XCD, whose count differs by model:
# left unknown, not guessed.
_SHARES = {"spx": 1.0, "dpx": 1 / 2, "tpx": 1 / 3, "qpx": 1 / 4}
# The attributes AMD's DRA driver publishes per device (GetDevice in ROCm/k8s-gpu-dra-driver
# cmd/gpu-kubeletplugin/deviceinfo.go): a whole GPU's own PCI address, or a partition's GPU's address.
PCI_ADDRESS_ATTRIBUTE, PARENT_ADDRESS_ATTRIBUTE = "pciAddr", "parentPciAddr"


class AmdDeviceForms:
    """AMD's answers to what the core asks of a vendor's devices (core.device_ids.DeviceForms).

    Samples name a GPU or partition by `gpu_id` alone; a device ID names it by PCI address, partition folder or
    DRA device: the AmdResolver the identity collector made (handed in as the resolver) joins the two. Without
    it, or while it cannot settle a device, the device is unresolved.
    """

    dra_driver = DRA_DRIVER
    samples = "AMD exporter samples (by gpu_id, through the AMD identity service and sysfs)"
    # Its ResourceSlices give a PCI address, never the gpu_id: a DRA device is met through the identity service
    # by its slice's `pciAddr` (a whole GPU) where one describes it, else through sysfs by its card and render
    # minors; a partition's slice names only its GPU (`parentPciAddr`), which sysfs is checked against.
    slices_name_devices = False
    slice_attributes = (PCI_ADDRESS_ATTRIBUTE, PARENT_ADDRESS_ATTRIBUTE)

    def is_gpu_device(self, resource: str, device_id: str, dra: bool = False) -> bool:
        return is_gpu_device(resource, dra)

    def key_for_device(self, device_id: str, dra: bool = False, resolve_mig=None) -> Optional[GpuKey]:
        return self.resolve_device(device_id, dra, resolve_mig).key

    def resolve_device(self, device_id: str, dra: bool = False, resolve_mig=None,
                       published: Optional[Mapping[str, str]] = None) -> DeviceResolution:
        """The device's gpu_id, and how many partitions sysfs shows its GPU split into (a whole GPU its slice
        publishes by `pciAddr` is one, sysfs or not). Waiting only on the identity service is `pending`; a form
        AMD's plugins do not write is not."""
        ref = parse_device_id(device_id, dra)
        if ref is None or not isinstance(resolve_mig, AmdResolver):
            return DeviceResolution(None)
        published = published or {}
        whole = published.get(PCI_ADDRESS_ATTRIBUTE, "")
        found = resolve_mig.resolution(ref, whole, published.get(PARENT_ADDRESS_ATTRIBUTE, ""))
        if found.gpu is None:
            return DeviceResolution(None, pending=found.unresolved == NO_IDENTITY)
        return DeviceResolution(GpuKey("gpu", found.gpu.gpu_id, ""), found.parts or (1 if whole else 0))

    def replica_of(self, device_id: str) -> Optional[str]:
        return None  # AMD's device plugin shares no GPU by replicas

    def partition_profile(self, resource: str) -> str:
        profile = resource.partition("/")[2]
        return "" if profile in ("gpu", "") or profile.startswith("spx_") else profile

    def whole_device_share(self, resource: str, device_id: str, dra: bool, profile: str,
                           node_profiles: Iterable[str], parts: int = 0) -> Optional[float]:
        """1 for a whole GPU, 1/N for one of the N partitions sysfs shows its GPU split into (the first partition,
        named by its GPU's PCI address, included). Where sysfs does not show the device (`parts` 0), what its
        partition-profile resource name says (`amd.com/spx_nps1` whole, `amd.com/dpx_nps2` a half); unknown (None)
        for an `amd.com/gpu` device or a DRA partition, which may be a partition of any size."""
        if parts:
            return 1 / parts
        if dra:
            return None
        return _SHARES.get(resource.partition("/")[2].partition("_")[0])

    def dra_partition_placement(self, device_name: str) -> Optional[Tuple[int, int]]:
        return None

    def driver_health(self, keys: Iterable[GpuKey], resolve_mig=None) -> Dict[GpuKey, str]:
        """The identity service's health of each held device it names (healthy, unhealthy; unknown while the
        service does not answer)."""
        if not isinstance(resolve_mig, AmdResolver):
            return {}
        return {key: resolve_mig.health(key.value) for key in keys if key.label == "gpu"}


DEVICE_FORMS = AmdDeviceForms()
