"""AMD's identity and health service as a collector: --amd.metrics-socket and --amd.sysfs-root, the refresher of the device join, its gauge and health rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from exporter.collectors.collector import Collector, Flag, Hub, SourceState
from exporter.collectors.kubernetes.health_section import DeviceHealthSection
from exporter.exposition.sections import BaseSection, Gauge, ScrapeView
from exporter.vendors.amd.families import AMD_IDENTITY_UP
from exporter.vendors.amd.identity_client import DEFAULT_SOCKET

SOCKET_FLAG, SYSFS_FLAG = "--amd.metrics-socket", "--amd.sysfs-root"


@dataclass(frozen=True)
class AmdIdentityOptions:
    """Where the identity service listens, where the node's sysfs is, how long one List may take, how often."""

    socket_path: str
    sysfs_root: str
    timeout_seconds: float  # --amd.timeout
    refresh_seconds: float  # --kubelet.refresh-interval: a new answer wakes the mapping's refresher at once


class _IdentityStatus(BaseSection):
    """pod_gpu_exporter_amd_identity_up among the status gauges; no rows of its own."""

    name = "amd_identity"
    per_scrape = True

    def _rows(self, view: ScrapeView) -> bytes:
        return b""

    def gauges(self) -> Iterable[Gauge]:
        return ((AMD_IDENTITY_UP, int(bool(self._up()))),)


class _ServiceHealth(DeviceHealthSection):
    """The held devices' health rows as the Kubernetes API's section writes them (there with the pods' status
    combined in), here from the service alone: without that section's API gauge, the API being off."""

    def gauges(self) -> Iterable[Gauge]:
        return ()


class AmdIdentityCollector(Collector):
    """Asks AMD's identity service (`/metricssvc.MetricsService/List` on its unix socket) and reads sysfs on a
    refresher of its own, never on a scrape; its AmdResolver is what the mapping resolves AMD devices by.

    The last good answer is kept through the service's restarts (AmdIdentity); an outage is logged once.
    Without the Kubernetes API it also writes the held devices' health from the service (with the API, the
    API's section writes it, the service's health combined with the pods' allocatedResourcesStatus).
    """

    name = "amd_identity"
    in_mapping = True  # `mapping` resolves AMD devices by it too
    section_sources = {"amd_identity": "the AMD identity service (List)"}
    flags = (
        Flag(SOCKET_FLAG, "amd_metrics_socket", "path", "On AMD nodes: the unix socket of AMD device-metrics-exporter's "
             "identity and health service (gRPC List: GPU ID, PCI address, UUID, health).", DEFAULT_SOCKET),
        Flag(SYSFS_FLAG, "amd_sysfs_root", "path", "On AMD nodes: where the node's sysfs is read, to find which GPU or "
             "partition a partition folder or DRA device is (the host's /sys, mounted read-only).", "/sys"),
    )
    # The demo's AMD node runs its own identity service and writes its own sysfs tree.
    refused = {"demo": {"amd_metrics_socket": "the demo runs its own simulated AMD identity service; leave out `demo` "
                                              "to serve a real node",
                        "amd_sysfs_root": "the demo writes its own simulated sysfs tree; leave out `demo` to serve a "
                                          "real node"}}

    def __init__(self) -> None:
        self._identity = None  # AmdIdentity, once prepared
        self._resolver = None  # AmdResolver
        self._refresher = None
        self._options: Optional[AmdIdentityOptions] = None
        self._with_api = False  # whether the Kubernetes API's section writes the devices' health
        self._dialect = None  # AMD's labels for a device, for the health rows
        self._attribution = None  # the kubelet refresher, told to build the mapping again on a new answer

    def options(self, config) -> AmdIdentityOptions:
        return AmdIdentityOptions(config.amd_metrics_socket, config.amd_sysfs_root, config.amd_timeout_seconds,
                                  config.kubelet_refresh_interval_seconds)

    def prepare(self, hub: Hub) -> None:
        from exporter.vendors.amd.identity import AmdIdentity
        from exporter.vendors.amd.identity_client import IdentityClient
        from exporter.vendors.amd.resolver import AmdResolver

        options = self._options = self.options(hub.config)
        self._identity = AmdIdentity(IdentityClient(options.socket_path, options.timeout_seconds))
        self._resolver = AmdResolver(self._identity, options.sysfs_root)
        hub.resolve_mig, hub.resolver_generation = self._resolver, self._resolver.generation

    def build(self, hub: Hub) -> None:
        self._with_api, self._dialect = hub.mapping_context is not None, hub.dialect
        self._attribution = hub.attribution

    def before_first_mapping(self, hub: Hub):
        """The first answer awaited (at most one List's timeout), so that the first mapping attributes by it."""
        bound = self._options.timeout_seconds + 0.5
        return (lambda: self._refresher.wait_first(bound)), bound

    def start(self) -> None:
        from exporter.core.refresher import Refresher

        self._refresher = Refresher("amd-identity-refresher", self._refresh, self._options.refresh_seconds,
                                    "the AMD identity and sysfs")
        self._refresher.start()

    def _refresh(self) -> None:
        """One reading; when it changes what devices resolve to, the mapping is built again at once, not at the
        kubelet refresher's next turn: an answer arriving late attributes within this refresh."""
        before = self._resolver.generation()
        self._resolver.refresh()
        if self._resolver.generation() != before and self._attribution is not None:
            self._attribution.refresh_soon()

    def start_for_mapping(self, hub: Hub) -> None:
        self._resolver.refresh()

    def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.stop(0.2)

    def sections(self):
        up = self._up
        if self._with_api:
            return (_IdentityStatus(up),)
        return (_IdentityStatus(up), _ServiceHealth(up, self._dialect))

    def _up(self) -> bool:
        return self._resolver is not None and self._resolver.snapshot().up

    def state(self) -> SourceState:
        snapshot = self._resolver.snapshot() if self._resolver is not None else None
        if snapshot is None or not snapshot.up:
            return SourceState(self.name, False, (snapshot.failure if snapshot else None) or "not asked yet")
        return SourceState(self.name, True)

    def announce(self) -> Mapping[str, object]:
        return {"amd_identity_socket": self._options.socket_path} if self._options else {}
