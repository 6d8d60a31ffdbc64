"""What a vendor's simulated node is to the demo: the devices its kubelet lists, its cluster, and how it starts."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Callable, List, Mapping, NamedTuple, Protocol, Sequence, Tuple

from exporter.demo.cluster import DemoKubeApi, SimulatedCluster
from exporter.sources.kubelet import AllocatedDevice


class DemoServing(NamedTuple):
    """What a started simulated node asks of the exporter that serves it."""

    settings: Mapping[str, object]  # Config fields pointing the exporter at its simulations (its upstream, its files)
    simulated: Callable[[str], str]  # the banner's lines on what it runs, given the URL the exporter serves at
    driver: object = None  # the simulated driver binding the registry hands the vendor's collectors, if any
    # What `mapping` needs besides the kubelet's socket to name each device's GPU on this node (flag, value, …).
    mapping_flags: Sequence[str] = ()


class SimulatedNode(Protocol):
    """One vendor's demo node (Vendor.demo_node makes it): the shared demo runs the kubelet and the API server
    with what it lists, then starts the rest of it."""

    cluster: SimulatedCluster

    def allocations(self) -> List[AllocatedDevice]:
        """What the kubelet lists as held (PodResources List)."""

    def offered(self) -> List[Tuple[str, str]]:
        """(resource, device ID) the device plugins offer, held or free (GetAllocatableResources)."""

    def start(self, workdir: Path, api: DemoKubeApi, config, stack: ExitStack) -> DemoServing:
        """Start its simulations under `workdir` (each stop pushed on `stack`), the API server up already."""
