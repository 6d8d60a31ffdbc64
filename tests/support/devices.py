"""A kubelet device as build_mapping reads it (core.mapping.DeviceLike), without the gRPC client."""

from __future__ import annotations

from typing import NamedTuple


class Device(NamedTuple):
    """The fields core.mapping.DeviceLike names, as sources.kubelet.AllocatedDevice has them."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    dra: bool = False
    claim: str = ""  # DRA only: "<claim namespace>/<claim name>"
    pool: str = ""  # DRA only: the ResourceSlice pool
    cdi_id: str = ""  # DRA only: the first CDI device ID
