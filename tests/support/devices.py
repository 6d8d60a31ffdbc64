"""A kubelet device as build_mapping reads it, without the gRPC client's extra fields."""

from __future__ import annotations

from typing import NamedTuple


class Device(NamedTuple):
    """The fields build_mapping reads from sources.kubelet.AllocatedDevice."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    dra: bool = False

