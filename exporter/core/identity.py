"""The GPU identity model: who holds a device (Owner), how a GPU is named (GpuIdentity), and the keys that claim it."""

from __future__ import annotations

from typing import Callable, FrozenSet, Mapping, NamedTuple, Optional, Tuple


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
    """One GPU, partition or MIG instance, named the ways a vendor's samples name it ("" where unknown); which
    label gives each field is the vendor's SampleDialect (on NVIDIA: UUID, gpu, device, GPU_I_ID)."""

    uuid: str  # the device's UUID; a MIG instance's parent GPU's
    gpu: str  # the driver's index of the device (each partition has its own where the vendor counts them so)
    device: str  # the device's node name: "nvidia<minor>", as /dev/nvidia<minor> (GKE's and DRA's device names)
    instance: str  # the instance within its GPU that the key needs (a MIG instance's GPU_I_ID), "" for a whole GPU
    # A partition's index within its GPU where the vendor names it beside its own index: written on our rows
    # for joins, never part of a key (the index alone names the partition).
    partition: str = ""

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


class SampleDialect(NamedTuple):
    """How one vendor's upstream samples name a device and its holder, and how our own rows name a device:
    the vendor's words, handed to the core (through its FigureNames), so the core names no vendor's labels.

    `written` is what a row this exporter writes about a device carries, in order, each where known: pairs
    of (GpuIdentity field, label name). `naming` are the GpuKey kinds ("UUID", "gpu", "device") whose value
    alone tells one device from another on a row. `shared_figure(name, labels)` says whether a sample is a
    figure of a whole GPU served on one of its partitions, which belongs to no single holder (None: the
    vendor has none).
    """

    uuid_labels: Tuple[str, ...]  # the labels carrying the device's UUID, the first non-empty wins
    index_label: str
    device_label: str  # "" where the vendor's exporter has none
    instance_label: str  # ""  where it has none
    partition_label: str  # "" where it has none
    written: Tuple[Tuple[str, str], ...]
    naming: Tuple[str, ...]
    upstream_owner_labels: FrozenSet[str]  # the upstream's own attribution: removed from every sample
    shared_figure: Optional[Callable[[str, Mapping[str, str]], bool]] = None

    def identity_of(self, labels: Mapping[str, str]) -> GpuIdentity:
        """The device a sample's labels name (all "" for a sample about no device)."""
        uuid = next((labels[name] for name in self.uuid_labels if labels.get(name)), "")
        return GpuIdentity(uuid, labels.get(self.index_label, "") if self.index_label else "",
                           labels.get(self.device_label, "") if self.device_label else "",
                           labels.get(self.instance_label, "") if self.instance_label else "",
                           labels.get(self.partition_label, "") if self.partition_label else "")

    def label_for(self, kind: str) -> str:
        """The label our rows write a GpuKey kind's value under ("" where they write none)."""
        field = _KEY_FIELDS.get(kind, "")
        return next((label for name, label in self.written if name == field), "")


# GpuKey.label → the GpuIdentity field holding the same value.
_KEY_FIELDS = {"UUID": "uuid", "gpu": "gpu", "device": "device"}
