"""The GPU → owner Mapping of one kubelet List: which containers hold each GPU key, and every allocation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional, Protocol, Set, Tuple

from exporter.core import hami
from exporter.core.device_ids import DeviceForms, DeviceResolution
from exporter.core.health import (NO_DEVICE_HEALTH, DeviceHealth, DeviceTaint, ResourceHealth, combined_status,
                                  device_health)
from exporter.core.identity import GpuIdentity, GpuKey, MigResolver, Owner


class DeviceLike(Protocol):
    """One device the kubelet assigned to one container (sources.kubelet.AllocatedDevice is one)."""

    namespace: str
    pod: str
    container: str
    resource: str  # device-plugin resource name; for DRA the driver
    device_id: str  # device-plugin device ID; for DRA the device name
    dra: bool
    claim: str  # DRA only: "<claim namespace>/<claim name>" ("" otherwise)
    pool: str  # DRA only: the ResourceSlice pool of the device ("" otherwise)
    cdi_id: str  # DRA only: the first CDI device ID, which pod status may name it by ("" when none)


class DraResolution(NamedTuple):
    """What the cluster says of a DRA device: its key from a ResourceSlice, and whether its claim is adminAccess."""

    admin_access: bool  # held through an adminAccess claim: a monitoring pod, never an owner
    key: Optional[GpuKey]  # None: fall back to the kubelet-only rule (device known to no slice)
    known: bool  # whether a ResourceSlice describes the device
    profile: str = ""  # a MIG device's profile ("1g.10gb") as its ResourceSlice publishes it
    # False: the kubelet lists the device under this container, but the pod's extended-resource claim
    # allocated it for another container's request (the kubelet lists that whole claim under each).
    held: bool = True
    resource: str = ""  # the extended resource it was requested as ("nvidia.com/gpu"); "" for a claim's device
    # Where a slice describes a device its vendor keys by its own rule (DeviceForms.slices_name_devices False):
    # the (name, value) of the attributes that rule reads (DeviceForms.slice_attributes), as published.
    published: Tuple[Tuple[str, str], ...] = ()


class MappingContext(Protocol):
    """What a cluster API adds to the kubelet's devices (the Kubernetes source implements it). Every
    method runs on the mapping refresher, never on a scrape, and never raises."""

    def resolve_dra(self, device: DeviceLike) -> DraResolution:
        """A DRA device's key from its ResourceSlice, whether its claim is adminAccess, and whether this
        container holds it (an extended-resource claim's device is held by one container of its pod)."""

    def extra_labels_for(self, pods: Iterable[Tuple[str, str]]) -> Dict[Tuple[str, str], tuple]:
        """(namespace, pod) → the ((name, value), …) written after the owner labels, for the pods known."""

    def retain_claims(self, devices: List[DeviceLike]) -> None:
        """Forget what is cached of claims that none of these devices is held through any more."""

    def ended_pods(self, pods: Iterable[Tuple[str, str]]) -> Set[Tuple[str, str]]:
        """Those of the (namespace, pod) that are known to have ended (Succeeded, Failed, deleted): the
        kubelet can go on listing their devices, yet they hold none."""

    def resource_health_for(
            self, pods: Iterable[Tuple[str, str]]) -> Optional[Dict[Tuple[str, str], Tuple[ResourceHealth, ...]]]:
        """(namespace, pod) → its containers' allocatedResourcesStatus entries, for the pods known; None
        while the pods' status is not known at all (then no device gets a health status)."""

    def device_taints(self) -> Tuple[DeviceTaint, ...]:
        """The taints on this node's DRA devices whose keys are known, sorted."""

    def published_drivers(self) -> Set[str]:
        """The DRA drivers of this node's ResourceSlices (what --gpu.vendor auto reads of them)."""

    def hami_assignments(self, pods: Iterable[Tuple[str, str]]) -> Dict[Tuple[str, str], hami.Assignment]:
        """(namespace, pod) → the GPUs HAMi's annotation says each container got, for the bound pods known."""


class Allocation(NamedTuple):
    """One allocated GPU device and the key it resolved to (None when unresolved)."""

    owner: Owner
    resource: str
    device_id: str
    key: Optional[GpuKey]
    dra: bool = False
    claim: str = ""  # DRA only: "<claim namespace>/<claim name>" the device is held through
    profile: str = ""  # DRA only: the MIG profile its ResourceSlice publishes ("" for a whole GPU)
    # A HAMi replica followed to the GPU the pod's annotation names: (memory MiB, cores %) HAMi gave; () else.
    hami: Tuple[int, ...] = ()
    parts: int = 0  # how many parts its GPU is split into, as the vendor's resolver read it (DeviceResolution)


@dataclass(frozen=True)
class Mapping:
    """Which owners hold each GPU key, as of one successful kubelet List."""

    owners: dict = field(default_factory=dict)  # GpuKey -> tuple[Owner, ...], sorted, distinct
    allocations: Tuple[Allocation, ...] = ()
    unresolved: Tuple[str, ...] = ()  # device IDs that no sample can be matched to
    # Those of them unresolved only while the vendor's own service has not answered (DeviceResolution.pending).
    pending: Tuple[str, ...] = ()
    # (namespace, pod) → ((name, value), …): labels written after the owner labels (--labels.*, from
    # the Kubernetes API), values unescaped; empty without it, so the output is the kubelet-only one.
    extra_labels: dict = field(default_factory=dict)
    # What else the refresh learnt with this List, compared by value, so that a refresh that learns the
    # same gives an equal mapping. (resource, GPU) → the replicas the kubelet offers per shared GPU,
    # from GetAllocatableResources (core.allocated); None when it offers none.
    offered: Optional[dict] = None
    # The held devices' health from their holders' pod status, and this node's DRA taints, from the
    # Kubernetes API (core.health); nothing without it.
    device_health: DeviceHealth = NO_DEVICE_HEALTH
    # The vendor's device forms the devices were read by, for what is later counted of the allocations
    # (core.allocated); None for a mapping built from nothing. Not compared: one vendor per process.
    forms: Optional[DeviceForms] = field(default=None, compare=False)

    def owners_for(self, key: GpuKey) -> tuple:
        return self.owners.get(key, ())

    def owners_of(self, identity: GpuIdentity) -> Tuple[Owner, ...]:
        """The containers holding this GPU or MIG instance, whichever of its names (UUID, index,
        device) the kubelet's device IDs used; sorted, so the same on every call."""
        return tuple(sorted({owner for key in identity.keys() for owner in self.owners.get(key, ())}))


EMPTY_MAPPING = Mapping()


def build_mapping(forms: DeviceForms, devices: Iterable[DeviceLike], resolve_mig: MigResolver | None = None,
                  context: MappingContext | None = None, offered: Optional[dict] = None) -> Mapping:
    """The Mapping of a List answer, its devices read by the vendor's `forms`: by the kubelet's devices
    alone, or with the cluster's `context` (pods that have ended left out, DRA keys from ResourceSlices,
    adminAccess claims, the pods' extra labels) and the replicas the kubelet `offered` per GPU. The one place a Mapping is built: the
    refresher and the `mapping` command both call it.
    """
    if offered:
        mapping = build_mapping(forms, devices, resolve_mig, context)
        return dataclasses.replace(mapping, offered=dict(offered))
    return _with_driver_health(forms, _built(forms, devices, resolve_mig, context), resolve_mig)


def _with_driver_health(forms: DeviceForms, mapping: Mapping, resolve_mig) -> Mapping:
    """The mapping with the health the vendor's own service reports of each held device combined in."""
    reported = forms.driver_health(tuple(mapping.owners), resolve_mig)
    if not reported:
        return mapping
    statuses = dict(mapping.device_health.statuses)
    for key, status in reported.items():
        statuses[key] = combined_status(statuses.get(key, status), status)
    return dataclasses.replace(mapping, device_health=mapping.device_health._replace(statuses=statuses))


def _built(forms: DeviceForms, devices: Iterable[DeviceLike], resolve_mig: MigResolver | None,
           context: MappingContext | None) -> Mapping:
    if context is None:
        return _group(forms, devices, resolve_mig, None)
    devices = list(devices)
    # The one place an ended pod is dropped: it owns no sample, has no allocation row, gets no labels.
    ended = context.ended_pods(sorted({(device.namespace, device.pod) for device in devices}))
    if ended:
        devices = [device for device in devices if (device.namespace, device.pod) not in ended]
    mapping = _group(forms, devices, resolve_mig, context, _followed_hami(devices, context))
    context.retain_claims(devices)
    pods = sorted({(a.owner.namespace, a.owner.pod) for a in mapping.allocations})
    health = DeviceHealth(device_health(devices, mapping.allocations, context.resource_health_for(pods)),
                          context.device_taints())
    # Kept only when there is any: a cluster with nothing to say gives the kubelet-only mapping.
    return dataclasses.replace(mapping, extra_labels=context.extra_labels_for(pods),
                               device_health=health if any(health) else NO_DEVICE_HEALTH)


def _followed_hami(devices: List[DeviceLike], context: MappingContext) -> dict:
    """(namespace, pod, container, device ID) → the HamiDevice a HAMi replica really stands for."""
    pods = sorted({(d.namespace, d.pod) for d in devices if not d.dra and hami.replica_gpu(d.device_id)})
    return hami.follow(devices, context.hami_assignments(pods)) if pods else {}


def _group(forms: DeviceForms, devices: Iterable[DeviceLike], resolve_mig: MigResolver | None,
           context: MappingContext | None, followed: Optional[dict] = None) -> Mapping:
    """Group the GPU devices by key; replicas of one container collapse into one owner.

    A DRA device held through an adminAccess claim (a monitoring pod), or listed under a container its
    pod's extended-resource claim did not allocate it for, is left out of that container altogether; a
    HAMi replica in `followed` is keyed by the GPU its pod's annotation names.
    """
    owner_sets: dict = {}
    allocations: dict = {}  # keyed so that a replica listed twice gives one allocation
    unresolved: set = set()
    pending: set = set()  # unresolved while the vendor's service has not answered
    settled: set = set()  # unresolved for good (a device ID listed twice may be both: then it is this)
    for device in devices:
        if not forms.is_gpu_device(device.resource, device.device_id, device.dra):
            continue
        owner = Owner(device.namespace, device.pod, device.container)
        given = (followed or {}).get((*owner, device.device_id))
        if given is not None:
            found = DeviceResolution(forms.key_for_device(given.uuid, False, resolve_mig))
            profile, resource = "", device.resource
        else:
            found, profile, resource = _device_key(forms, device, resolve_mig, context)
        if found is _NOT_AN_OWNER:
            continue
        key = found.key
        allocations[(owner, resource, device.device_id)] = Allocation(
            owner, resource, device.device_id, key, device.dra,
            device.claim if device.dra else "", profile,
            (given.memory_mib, given.cores_percent) if given is not None else (), found.parts,
        )
        if key is None:
            unresolved.add(device.device_id)
            (pending if found.pending else settled).add(device.device_id)
        else:
            owner_sets.setdefault(key, set()).add(owner)
    return Mapping(
        owners={key: tuple(sorted(owners)) for key, owners in owner_sets.items()},
        allocations=tuple(sorted(allocations.values(), key=_allocation_order)),
        unresolved=tuple(sorted(unresolved)),
        pending=tuple(sorted(pending - settled)),
        forms=forms,
    )


_NOT_AN_OWNER = object()


def _device_key(forms: DeviceForms, device: DeviceLike, resolve_mig: MigResolver | None, context: MappingContext | None):
    """(DeviceResolution, MIG profile from a ResourceSlice, resource of its allocation row) of one device; the
    resolution is _NOT_AN_OWNER for adminAccess and for a device its container does not hold."""
    if device.dra and context is not None:
        resolution = context.resolve_dra(device)
        if resolution.admin_access or not resolution.held:
            return _NOT_AN_OWNER, "", ""
        resource = resolution.resource or device.resource
        if resolution.known:  # a ResourceSlice describes it: its answer, even None, beats the name rule
            return DeviceResolution(resolution.key), resolution.profile, resource
        found = forms.resolve_device(device.device_id, device.dra, resolve_mig, dict(resolution.published))
        return found, "", resource
    return forms.resolve_device(device.device_id, device.dra, resolve_mig), "", device.resource


def _allocation_order(allocation: Allocation) -> tuple:
    return (allocation.owner, allocation.resource, allocation.device_id)
