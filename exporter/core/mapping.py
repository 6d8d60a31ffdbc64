"""The GPU → owner Mapping of one kubelet List: which containers hold each GPU key, and every allocation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Optional, Protocol, Tuple

from exporter.core.device_ids import is_gpu_device, key_for_device
from exporter.core.identity import GpuKey, MigResolver, Owner


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
    # (namespace, pod) → ((name, value), …): labels written after the owner labels (--labels.*, from
    # the Kubernetes API), values unescaped; empty without it, so the output is the kubelet-only one.
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
