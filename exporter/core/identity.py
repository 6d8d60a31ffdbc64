"""The GPU identity model: who holds a device (Owner), how a GPU is named (GpuIdentity), and the keys that claim it."""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple


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

# Resolves a MIG device known by where it lies — (parent "GPU-<uuid>", GPU instance profile ID, placement
# start) — to its GPU instance ID, or None when unknown. The same rules as a MigResolver.
MigPlacementResolver = Callable[[str, int, int], Optional[str]]


class GpuIdentity(NamedTuple):
    """One GPU or MIG instance, named the four ways dcgm-exporter's samples name it ("" where unknown)."""

    uuid: str  # the UUID label, "GPU-…"; a MIG instance's parent GPU
    gpu: str  # the gpu label: the NVML index
    device: str  # the device label: "nvidia<minor>", as /dev/nvidia<minor> (GKE's and DRA's device names)
    instance: str  # the GPU_I_ID label of a MIG instance, "" for a whole GPU

    def keys(self) -> Tuple[GpuKey, ...]:
        """The keys a device with this identity can be claimed by (empty values claim nothing)."""
        keys = []
        if self.uuid:
            keys.append(GpuKey("UUID", self.uuid, self.instance))
        if self.gpu:
            keys.append(GpuKey("gpu", self.gpu, self.instance))
        if self.device:
            keys.append(GpuKey("device", self.device, self.instance))
        return tuple(keys)
