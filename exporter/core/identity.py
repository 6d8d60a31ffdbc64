"""The GPU identity model: who holds a device (Owner), and the sample labels that name a GPU (GpuKey)."""

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
