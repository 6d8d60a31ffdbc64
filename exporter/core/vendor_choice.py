"""`--gpu.vendor auto`: whose GPUs a node has, from what the node shows, by each vendor's own words.

Pure: the caller gathers what the node shows (the kubelet's device-plugin resources offered and held, the
DRA drivers of the devices held and of the node's ResourceSlices, which of the vendors' marker paths exist);
each candidate brings its device forms (which resources and which DRA driver are its GPUs) and its marker
paths (the AMD exporter's identity socket, for one). The fallback vendor, served while nothing is seen, is
looked at last: any sign of another vendor wins over it, so a node where the fallback's words also appear
(its driver's ResourceSlices left behind, a stray resource) is still the other vendor's.
"""

from __future__ import annotations

from typing import Collection, Iterable, NamedTuple, Optional, Sequence, Tuple

from exporter.core.device_ids import DeviceForms
from exporter.core.mapping import DeviceLike


class Candidate(NamedTuple):
    """One vendor as detection reads it: its name, device forms and marker paths."""

    name: str
    forms: DeviceForms
    marker_paths: Tuple[str, ...] = ()


class NodeSigns(NamedTuple):
    """What the node shows at one look."""

    offered: Sequence[Tuple[str, str]] = ()  # (resource, device ID) the device plugins offer (GetAllocatableResources)
    held: Sequence[DeviceLike] = ()  # the devices the kubelet lists as held (List), DRA ones included
    slice_drivers: Collection[str] = ()  # the drivers of the node's ResourceSlices, when the API context is on
    present_paths: Collection[str] = ()  # those of the candidates' marker paths that exist


class VendorChoice(NamedTuple):
    vendor: str
    reason: str  # one line: what was seen


def choose_vendor(candidates: Sequence[Candidate], signs: NodeSigns, fallback: str) -> Optional[VendorChoice]:
    """The vendor the node's signs name, looked at in turn (device-plugin resources, DRA drivers, marker
    paths), every other vendor before the fallback; None while nothing names one."""
    ordered = [c for c in candidates if c.name != fallback] + [c for c in candidates if c.name == fallback]
    for candidate in ordered:
        reason = _first_sign(candidate, signs)
        if reason is not None:
            return VendorChoice(candidate.name, reason)
    return None


def _first_sign(candidate: Candidate, signs: NodeSigns) -> Optional[str]:
    forms = candidate.forms
    resource = _gpu_resource(forms, signs.offered, ((d.resource, d.device_id) for d in signs.held if not d.dra))
    if resource is not None:
        return f"the kubelet lists its GPU resource {resource}"
    drivers = {d.resource for d in signs.held if d.dra} | set(signs.slice_drivers)
    if forms.dra_driver and forms.dra_driver in drivers:
        return f"the node has devices of its DRA driver {forms.dra_driver}"
    present = next((path for path in candidate.marker_paths if path in signs.present_paths), None)
    if present is not None:
        return f"{present} exists"
    return None


def _gpu_resource(forms: DeviceForms, *listings: Iterable[Tuple[str, str]]) -> Optional[str]:
    """The first device-plugin resource of these listings that is one of the vendor's GPUs."""
    for listing in listings:
        for resource, device_id in listing:
            if forms.is_gpu_device(resource, device_id):
                return resource
    return None
