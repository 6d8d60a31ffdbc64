"""DRA extended resources (KEP-5004): which devices of a pod's extended-resource claim each container owns.

A plain `nvidia.com/gpu` request can be met by a DRA device: the scheduler then makes one claim for the
whole pod and records in `status.extendedResourceClaimStatus` which of its requests each container's
extended resources became. The kubelet lists the whole claim, every device, under each container that
has any mapping, so only the claim's allocation results (request → device) and these mappings tell
which container holds which device.
"""

from __future__ import annotations

from typing import FrozenSet, NamedTuple, Optional, Tuple


class ExtendedResourceClaim(NamedTuple):
    """A pod's `status.extendedResourceClaimStatus`, as kept in its PodInfo."""

    name: str  # the claim the scheduler made for the pod, in the pod's namespace
    mappings: Tuple[Tuple[str, str, str], ...]  # (container, extended resource name, request name), sorted


class ContainerShare(NamedTuple):
    """What the mappings say of one device listed under one container."""

    held: bool  # False: the device was allocated for another container's request
    resource: str  # the extended resource the container asked for ("nvidia.com/gpu"); "" when not held


def extended_resource_claim(status) -> Optional[ExtendedResourceClaim]:
    """The pod status's extendedResourceClaimStatus, or None without one. Mappings whose fields are not all
    strings are left out (the others still split the claim)."""
    # getattr: lightkube-models older than Kubernetes 1.34 have no such field, and a pod must still be read.
    found = getattr(status, "extendedResourceClaimStatus", None) if status is not None else None
    name = getattr(found, "resourceClaimName", None)
    if not isinstance(name, str) or not name:
        return None
    mappings = []
    for mapping in getattr(found, "requestMappings", None) or ():
        fields = (getattr(mapping, "containerName", None), getattr(mapping, "resourceName", None),
                  getattr(mapping, "requestName", None))
        if all(isinstance(field, str) and field for field in fields):
            mappings.append(fields)
    return ExtendedResourceClaim(name, tuple(sorted(mappings)))


def container_share(claim: ExtendedResourceClaim, container: str,
                    requests: FrozenSet[str]) -> Optional[ContainerShare]:
    """Whether `container` holds a device its claim allocated for `requests` (the results' request names),
    and as which extended resource; None when no mapping names any of those requests (nothing known)."""
    mapped = [(owner, resource) for owner, resource, request in claim.mappings if request in requests]
    if not mapped:
        return None
    own = sorted(resource for owner, resource in mapped if owner == container)
    return ContainerShare(True, own[0]) if own else ContainerShare(False, "")


def request_name(result_request: str) -> str:
    """The request a result answers: a subrequest's result names "<request>/<subrequest>"."""
    return result_request.partition("/")[0]
