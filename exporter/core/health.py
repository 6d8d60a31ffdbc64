"""Device health from the holders' pod status and DRA device taints, in the core's terms (pure)."""

from __future__ import annotations

from typing import Dict, Iterable, Mapping as MappingType, NamedTuple, Optional, Tuple

from exporter.core.identity import GpuKey, Owner

HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
# Two holders that disagree: unhealthy wins over anything; a holder's known answer beats another's
# Unknown (a DRA driver that reports no health gets Unknown, and says nothing about the device).
_RANK = {UNKNOWN: 0, HEALTHY: 1, UNHEALTHY: 2}
_CLAIM_PREFIX = "claim:"  # a DRA entry's name: "claim:<claim>/<request>" or "claim:<claim>"


class ResourceHealth(NamedTuple):
    """One entry of a container's status.allocatedResourcesStatus[].resources[], as the kubelet wrote it."""

    container: str
    name: str  # the device plugin's resource ("nvidia.com/gpu"), or "claim:<claim>[/<request>]" for DRA
    resource_id: str  # the device plugin's device ID; for DRA the first CDI ID, else "<driver>/<pool>/<device>"
    health: str  # "Healthy", "Unhealthy" or (DRA only) "Unknown"


class DeviceHealth(NamedTuple):
    """The held devices' health and this node's DRA taints, as the mapping carries them (Mapping.device_health)."""

    statuses: Dict[GpuKey, str] = {}  # GpuKey → healthy/unhealthy/unknown (device_health); never mutated
    taints: Tuple["DeviceTaint", ...] = ()


NO_DEVICE_HEALTH = DeviceHealth()  # what a mapping carries without the API, or with nothing to say


class DeviceTaint(NamedTuple):
    """One taint a DRA driver put on one device of this node's ResourceSlices."""

    key: GpuKey
    taint_key: str
    value: str
    effect: str  # None, NoSchedule or NoExecute (taint_effect): an effect a newer API adds reads as None


# A DeviceTaint's effects (resource.k8s.io): "None" is purely informational. More may be added, and the API
# tells consumers to treat an effect they do not know like None: the scheduler and the eviction controller
# of a cluster that has it do not act on it for us to report otherwise.
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")


def taint_effect(published) -> str:
    """A published DeviceTaint effect as the API says to read it: an unknown (or missing) one is None."""
    return published if published in TAINT_EFFECTS else "None"


def health_status(reported: str) -> str:
    """The kubelet's Healthy/Unhealthy/Unknown as a label value; anything else is unknown."""
    lowered = reported.lower()
    return lowered if lowered in _RANK else UNKNOWN


def combined_status(first: str, second: str) -> str:
    """The status of a device two holders (or two names of it) report differently: unhealthy if either
    says so, else healthy if either says so (a known answer beats Unknown), else unknown."""
    return second if _RANK[second] > _RANK[first] else first


def resource_ids(device) -> Tuple[str, ...]:
    """The resourceIDs the kubelet can write for one of its devices (a kubelet DeviceLike)."""
    if not device.dra:
        return (device.device_id,)
    # The kubelet writes the device's first CDI ID when the driver gave any, else driver/pool/device.
    by_name = f"{device.resource}/{device.pool}/{device.device_id}"
    return (by_name, device.cdi_id) if device.cdi_id else (by_name,)


def _names(report: ResourceHealth, device) -> bool:
    if report.container != device.container or report.resource_id not in resource_ids(device):
        return False
    return report.name.startswith(_CLAIM_PREFIX) if device.dra else report.name == device.resource


def device_health(devices: Iterable, allocations: Iterable,
                  reports: Optional[MappingType[Tuple[str, str], Tuple[ResourceHealth, ...]]]) -> Dict[GpuKey, str]:
    """GpuKey → healthy/unhealthy/unknown of every held device; `unknown` where no holder's pod status
    reports on it, which is what the kubelet itself would write for a device it knows nothing of.

    `devices` are the kubelet's (they carry the IDs the pod status names), `allocations` the mapping's
    (they carry the key each device resolved to, in any device-ID form), `reports` each known pod's
    entries, or None when the pods' status is not known (no Kubernetes API, or its watch stale): then
    nothing is, and no device gets a status.
    """
    if reports is None:
        return {}
    # A DRA allocation's row may name the extended resource it was requested as, not the driver the
    # kubelet lists: it is found by its claim.
    keys = {(a.owner, a.claim if a.dra else a.resource, a.device_id): a.key for a in allocations if a.key is not None}
    health: Dict[GpuKey, str] = {}
    for device in devices:
        owner = Owner(device.namespace, device.pod, device.container)
        key = keys.get((owner, device.claim if device.dra else device.resource, device.device_id))
        if key is None:
            continue
        status = health.get(key, UNKNOWN)
        for report in reports.get((device.namespace, device.pod), ()):
            if _names(report, device):
                status = combined_status(status, health_status(report.health))
        health[key] = status
    return health
