"""What the core asks of a vendor's device forms: which allocated devices are GPUs, and the key each one names."""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Protocol, Tuple

from exporter.core.identity import GpuKey, MigResolver


class DeviceForms(Protocol):
    """One vendor's kubelet resource names, device-ID forms and DRA driver, as the mapping reads them.

    The core keeps the identity model (GpuKey, GpuIdentity) and builds the Mapping; a vendor's package
    says which of the kubelet's devices are its GPUs and which sample labels each device ID names
    (exporter/vendors/<vendor>/, handed in as Vendor.devices).
    """

    dra_driver: str  # the DRA driver whose devices are this vendor's GPUs
    samples: str  # how a log line names the upstream samples devices are matched to ("… samples")
    # Whether its ResourceSlices publish what its samples name a device by (a UUID): if not, a DRA device
    # is keyed by its own rule (key_for_device) even where a slice describes it.
    slices_name_devices: bool

    def is_gpu_device(self, resource: str, device_id: str, dra: bool = False) -> bool:
        """Whether an allocated device (a device-plugin resource, or a DRA driver with `dra`) is one of
        the vendor's GPUs, or a share or partition of one."""

    def key_for_device(self, device_id: str, dra: bool = False,
                       resolve_mig: Optional[MigResolver] = None) -> Optional[GpuKey]:
        """The key samples of this device carry, or None when it cannot be resolved without guessing.
        `resolve_mig` is whatever the vendor's collectors put on the hub for it (Hub.resolve_mig)."""

    def replica_of(self, device_id: str) -> Optional[str]:
        """The GPU a shared replica's device ID names, or None when the ID is no replica."""

    def partition_profile(self, resource: str) -> str:
        """The partition profile a device-plugin resource name carries, "" for a whole-GPU resource."""

    def whole_device_share(self, resource: str, device_id: str, dra: bool, profile: str,
                           node_profiles: Iterable[str]) -> Optional[float]:
        """What one device counts for before it is split among replicas or holders: 1 for a whole GPU,
        a partition's share, None when that share is unknown."""

    def dra_partition_placement(self, device_name: str) -> Optional[Tuple[int, int]]:
        """Where a DRA partition device lies on its GPU, as its name gives it (profile ID, placement
        start), for the vendor's resolver; None for other names."""

    def driver_health(self, keys: Iterable[GpuKey], resolve_mig: Optional[MigResolver] = None) -> Dict[GpuKey, str]:
        """Each held key's health as the vendor's own service reports it (healthy, unhealthy, unknown), combined
        with what the pods' status says; {} where the vendor reports none."""
