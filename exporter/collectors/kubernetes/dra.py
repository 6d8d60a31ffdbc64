"""DRA devices' identities from ResourceSlices, and what claims' allocations say of them, for the GPU mapping."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, FrozenSet, Iterable, NamedTuple, Optional, Set, Tuple

from exporter.base.cache import RetryingCache
from exporter.base.logs import DependencyReporter
from exporter.core.device_ids import DeviceForms
from exporter.core.health import DeviceTaint, taint_effect
from exporter.core.identity import GpuKey, MigPlacementResolver, MigResolver
from exporter.core.mapping import DraResolution
from exporter.collectors.kubernetes.extended_resources import request_name
from exporter.collectors.kubernetes.stream import ANSWER_SECONDS, decode_object, read_answer
from exporter.collectors.kubernetes.watch import describe_failure

DeviceRef = Tuple[str, str, str]  # (driver, pool, device name), as the kubelet and ResourceSlices name it
_MAX_CLAIMS = 4096
_CLAIM_RETRY_SECONDS = 60.0


class SliceDevice(NamedTuple):
    """The attributes NVIDIA's DRA driver publishes that identify a device's dcgm samples.

    Whole GPU (type "gpu"): `uuid` is the GPU's "GPU-…" UUID. MIG device (type "mig"): `uuid` is the
    MIG device's own "MIG-…" UUID and `parentUUID` its GPU's; the driver publishes no GPU instance
    ID (its device name encodes the profile and memory placement, not the instance ID), so the
    instance is looked up from the MIG UUID through NVML when that is available. A dynamic MIG device
    (made when its claim is prepared) has no `uuid`: its instance is looked up from the parent and the
    placement its name gives.
    """

    kind: str  # "gpu", "mig", or whatever else the driver says
    uuid: str
    parent_uuid: str
    profile: str = ""  # a MIG device's profile ("1g.10gb"): what share of its GPU it is
    taints: Tuple[Tuple[str, str, str], ...] = ()  # (key, value, effect) of each taint its driver put on it
    # (name, value) of the string attributes the vendor's own rule reads (DeviceForms.slice_attributes), for a
    # vendor whose slices give an address, not what its samples name a device by.
    published: Tuple[Tuple[str, str], ...] = ()


class ClaimResults(NamedTuple):
    """What one claim's allocation results say of their devices."""

    admin_access: FrozenSet[DeviceRef]  # the devices held with adminAccess
    requests: Dict[DeviceRef, FrozenSet[str]]  # device → the requests it was allocated for (never mutated)


def slice_devices(resource_slice, kept: Tuple[str, ...] = ()) -> Dict[DeviceRef, SliceDevice]:
    """The devices of one ResourceSlice (v1 and v1beta2 `attributes` and `taints`, or v1beta1 `basic.…`), with
    the string attributes named in `kept` (by unqualified name) where a device publishes them."""
    spec = resource_slice.spec
    pool = spec.pool.name if spec.pool is not None else ""
    found = {}
    for device in spec.devices or ():
        fields = getattr(device, "basic", None) or device
        attributes = getattr(fields, "attributes", None) or {}
        values = {_unqualified(name, spec.driver): _string_value(value) for name, value in attributes.items()}
        found[(spec.driver, pool, device.name)] = SliceDevice(
            values.get("type", ""), values.get("uuid", ""), values.get("parentUUID", ""),
            values.get("profile", ""), _taints(getattr(fields, "taints", None)),
            tuple((name, values[name]) for name in kept if values.get(name)))
    return found


def taint_of(taint) -> Tuple[str, str, str]:
    """(key, value, effect) of a decoded DeviceTaint, a slice device's or a DeviceTaintRule's (taint_rules):
    the effect read as the API says (health.taint_effect)."""
    return (taint.key, taint.value or "", taint_effect(taint.effect))


def _taints(taints) -> Tuple[Tuple[str, str, str], ...]:
    return tuple(sorted(taint_of(taint) for taint in taints or ()))


def _unqualified(name: str, driver: str) -> str:
    # Attribute names are in the driver's domain unless qualified: "uuid" and "gpu.nvidia.com/uuid" match.
    return name[len(driver) + 1:] if name.startswith(driver + "/") else name


def _string_value(value) -> str:
    text = value.get("string") if isinstance(value, dict) else getattr(value, "string", None)
    return text or ""


class DraDevices:
    """ResourceSlice devices of this node (fed by a watch) and the allocation results of claims (fetched
    once per claim, on the refresher, and forgotten when the kubelet stops reporting the claim)."""

    def __init__(self, get_claim: Callable[[str, str], object], forms: DeviceForms,
                 resolve_mig: Optional[MigResolver] = None, clock: Callable[[], float] = time.monotonic):
        self._get_claim = get_claim
        self._forms = forms  # the vendor's DRA driver, and what its device names say
        self.resolve_mig = resolve_mig
        self._lock = threading.Lock()
        self._by_slice: Dict[str, Dict[DeviceRef, SliceDevice]] = {}
        self._devices: Dict[DeviceRef, SliceDevice] = {}
        # "<namespace>/<name>" of a claim → its allocation results.
        self._claims: RetryingCache[str, ClaimResults] = RetryingCache(
            self._fetch_claim, _CLAIM_RETRY_SECONDS, _MAX_CLAIMS, clock)
        self._reporter = DependencyReporter("kubernetes-api")

    # The ResourceSlice ListWatch's store (watch.WatchedStore).
    def replace(self, slices: list, complete: bool = True) -> None:
        # A slice skipped as malformed (not `complete`) describes no device we could read: nothing to keep of it.
        by_slice = {s.metadata.name: slice_devices(s, self._forms.slice_attributes) for s in slices}
        with self._lock:
            self._by_slice = by_slice
            self._devices = _merged(by_slice)

    def add(self, resource_slice) -> None:
        devices = slice_devices(resource_slice, self._forms.slice_attributes)
        with self._lock:
            self._by_slice[resource_slice.metadata.name] = devices
            self._devices = _merged(self._by_slice)

    update = add  # a modified slice replaces the devices it published

    def delete(self, resource_slice) -> None:
        with self._lock:
            self._by_slice.pop(resource_slice.metadata.name, None)
            self._devices = _merged(self._by_slice)

    def drivers(self) -> Set[str]:
        """The drivers of the devices the node's ResourceSlices publish."""
        with self._lock:
            return {ref[0] for ref in self._devices}

    def resolve(self, driver: str, pool: str, device: str, claim: str) -> DraResolution:
        """Called while building a mapping (refresher thread); never raises."""
        if self._is_admin_access(claim, (driver, pool, device)):
            return DraResolution(True, None, False)
        with self._lock:
            published = self._devices.get((driver, pool, device))
        if published is None or driver != self._forms.dra_driver:
            return DraResolution(False, None, False)
        if not self._forms.slices_name_devices:
            # A vendor whose slices name no sample's device (one giving only an address): its own rule decides,
            # told what the slice publishes.
            return DraResolution(False, None, False, published=published.published)
        return DraResolution(False, self._key_for(device, published), True, published.profile)

    def taints(self, rule_taints: Optional[Callable[[str, str, str], tuple]] = None) -> Tuple[DeviceTaint, ...]:
        """The taints on this node's GPU devices whose keys are known (MIG devices need NVML; a vendor whose slices
        give only an address, its own rule), sorted: each device's own, and those `rule_taints` (DeviceTaintRules,
        by driver, pool and device) add to them. A device its vendor cannot key yet has none: a guessed key would
        taint another device's rows."""
        with self._lock:
            devices = [(ref, published) for ref, published in self._devices.items() if ref[0] == self._forms.dra_driver]
        found = set()
        for ref, published in devices:
            taints = published.taints + (rule_taints(*ref) if rule_taints is not None else ())
            key = self._taint_key(ref[2], published) if taints else None
            if key is not None:
                found.update(DeviceTaint(key, *taint) for taint in taints)
        return tuple(sorted(found))

    def _taint_key(self, name: str, published: SliceDevice) -> Optional[GpuKey]:
        """The key a tainted device's samples carry: as resolve() keys it when a claim holds it, so that its taint
        rows join its allocation rows (the vendor's own rule, told the slice's attributes, where slices name no
        sample's device)."""
        if self._forms.slices_name_devices:
            return self._key_for(name, published)
        return self._forms.resolve_device(name, True, self.resolve_mig, dict(published.published)).key

    def _key_for(self, name: str, published: SliceDevice) -> Optional[GpuKey]:
        if published.kind == "mig" or published.uuid.startswith("MIG-"):
            if not published.uuid:
                return self._dynamic_mig_key(name, published)
            parent = self.resolve_mig(published.uuid) if self.resolve_mig else None
            return GpuKey("UUID", parent[0], parent[1]) if parent else None
        return GpuKey("UUID", published.uuid, "") if published.uuid.startswith("GPU-") else None

    def _dynamic_mig_key(self, name: str, published: SliceDevice) -> Optional[GpuKey]:
        """A MIG device published without a UUID (dynamic MIG): its GPU instance is found through NVML from
        its parent's UUID and the profile ID and placement start its name gives."""
        placement = self._forms.dra_partition_placement(name)
        # A resolver that is a plain function (no NVML placement lookup) leaves such a device unresolved.
        lookup: Optional[MigPlacementResolver] = getattr(self.resolve_mig, "placement", None)
        if placement is None or lookup is None or not published.parent_uuid.startswith("GPU-"):
            return None
        instance = lookup(published.parent_uuid, *placement)
        return GpuKey("UUID", published.parent_uuid, instance) if instance is not None else None

    def retain_claims(self, claims: Iterable[str]) -> None:
        """Forget cached claims ("<namespace>/<name>") the kubelet no longer reports (a claim name may be
        reused later)."""
        self._claims.retain(claims)

    def requests_for(self, claim: str, ref: DeviceRef) -> Optional[FrozenSet[str]]:
        """The requests of `claim` ("<namespace>/<name>") this device was allocated for; None while the claim
        cannot be read."""
        results = self._claims.get(claim) if claim.partition("/")[2] else None
        return None if results is None else results.requests.get(ref, frozenset())

    def _is_admin_access(self, claim: str, ref: DeviceRef) -> bool:
        if not claim.partition("/")[2]:
            return False
        results = self._claims.get(claim)
        return results is not None and ref in results.admin_access

    def _fetch_claim(self, claim: str) -> Optional[ClaimResults]:
        namespace, _, name = claim.partition("/")
        try:
            found = self._get_claim(namespace, name)
        except Exception as exc:  # noqa: BLE001 - reported once per kind, retried later, never fatal
            reason, message = describe_failure(exc, "get", "resourceclaims")
            self._reporter.failed(f"resourceclaims:{reason}", message, claim=claim)
            return None
        self._reporter.succeeded("Kubernetes API answering again", resource="resourceclaims")
        return _claim_results(found)


def read_claim(http, namespace: str, name: str, seconds: float = ANSWER_SECONDS):
    """A ResourceClaim, read v1 then (a 404: Kubernetes 1.32-1.33) v1beta1, each get bounded in size and time
    (stream.read_answer): claims are read on the mapping refresher, which a trickled answer must not hold."""
    from urllib.parse import quote

    path = f"namespaces/{quote(namespace, safe='')}/resourceclaims/{quote(name, safe='')}"
    try:
        raw = read_answer(http, f"/apis/resource.k8s.io/v1/{path}", seconds=seconds)
    except Exception as exc:  # noqa: BLE001 - only a 404 (version not served) is retried in v1beta1
        if getattr(getattr(exc, "status", None), "code", None) != 404:
            raise
        # Imported only here: each API version's models cost RSS.
        from lightkube.resources.resource_v1beta1 import ResourceClaim as ResourceClaimV1beta1

        return decode_object(read_answer(http, f"/apis/resource.k8s.io/v1beta1/{path}", seconds=seconds),
                             ResourceClaimV1beta1)
    from lightkube.resources.resource_v1 import ResourceClaim

    return decode_object(raw, ResourceClaim)


def _claim_results(claim) -> ClaimResults:
    allocation = claim.status.allocation if claim.status is not None else None
    devices = allocation.devices if allocation is not None else None
    admin, requests = set(), {}
    for result in (devices.results if devices is not None else None) or ():
        ref = (result.driver, result.pool, result.device)
        if result.adminAccess:
            admin.add(ref)
        if isinstance(result.request, str):
            requests[ref] = requests.get(ref, frozenset()) | {request_name(result.request)}
    return ClaimResults(frozenset(admin), requests)


def _merged(by_slice: Dict[str, Dict[DeviceRef, SliceDevice]]) -> Dict[DeviceRef, SliceDevice]:
    merged: Dict[DeviceRef, SliceDevice] = {}
    for devices in by_slice.values():
        merged.update(devices)
    return merged
