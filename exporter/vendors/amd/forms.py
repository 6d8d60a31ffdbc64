"""AMD's device forms: which kubelet allocations are AMD GPUs, and the gpu_id each names, through sysfs and the identity service."""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from exporter.core.identity import GpuKey
from exporter.vendors.amd.device_ids import DRA_DRIVER, PCI, is_gpu_device, parse_device_id
from exporter.vendors.amd.resolver import AmdResolver

# What one device of a partition-profile resource (`amd.com/<compute>_<memory>`) counts for: its GPU split by
# its compute mode. CPX makes one partition per XCD, whose count differs by model: left unknown, not guessed.
_SHARES = {"spx": 1.0, "dpx": 1 / 2, "tpx": 1 / 3, "qpx": 1 / 4}


class AmdDeviceForms:
    """AMD's answers to what the core asks of a vendor's devices (core.device_ids.DeviceForms).

    Samples name a GPU or partition by `gpu_id` alone; a device ID names it by PCI address, partition folder or
    DRA device: the AmdResolver the identity collector made (handed in as the resolver) joins the two. Without
    it, or while it cannot settle a device, the device is unresolved.
    """

    dra_driver = DRA_DRIVER
    samples = "AMD exporter samples (by gpu_id, through the AMD identity service and sysfs)"
    # Its ResourceSlices give a PCI address (a partition's parent's only), never the gpu_id: a DRA device is
    # met through sysfs by its card and render minors, whether or not a slice describes it.
    slices_name_devices = False

    def is_gpu_device(self, resource: str, device_id: str, dra: bool = False) -> bool:
        return is_gpu_device(resource, dra)

    def key_for_device(self, device_id: str, dra: bool = False, resolve_mig=None) -> Optional[GpuKey]:
        ref = parse_device_id(device_id, dra)
        if ref is None or not isinstance(resolve_mig, AmdResolver):
            return None
        gpu = resolve_mig.resolve(ref)
        return None if gpu is None else GpuKey("gpu", gpu.gpu_id, "")

    def replica_of(self, device_id: str) -> Optional[str]:
        return None  # AMD's device plugin shares no GPU by replicas

    def partition_profile(self, resource: str) -> str:
        profile = resource.partition("/")[2]
        return "" if profile in ("gpu", "") or profile.startswith("spx_") else profile

    def whole_device_share(self, resource: str, device_id: str, dra: bool, profile: str,
                           node_profiles: Iterable[str]) -> Optional[float]:
        """1 for a whole GPU, a partition's share of its GPU where its resource says it; None where unknown (a DRA
        device or an `amd.com/gpu` partition folder may be a partition of any size). Under `single` naming a PCI
        address counts as a whole GPU: the first partition of a partitioned GPU is named so too, which its name
        cannot tell (docs/amd.md says so)."""
        if dra:
            return None
        compute = resource.partition("/")[2].partition("_")[0]
        if compute in _SHARES:
            return _SHARES[compute]
        if compute == "gpu":
            ref = parse_device_id(device_id)
            return 1.0 if ref is not None and ref.form == PCI else None
        return None

    def dra_partition_placement(self, device_name: str) -> Optional[Tuple[int, int]]:
        return None

    def driver_health(self, keys: Iterable[GpuKey], resolve_mig=None) -> Dict[GpuKey, str]:
        """The identity service's health of each held device it names (healthy, unhealthy; unknown while the
        service does not answer)."""
        if not isinstance(resolve_mig, AmdResolver):
            return {}
        return {key: resolve_mig.health(key.value) for key in keys if key.label == "gpu"}


DEVICE_FORMS = AmdDeviceForms()
