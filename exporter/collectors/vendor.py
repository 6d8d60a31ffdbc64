"""What one GPU vendor is to the exporter: its name, its upstream exporter's reader and words, its own collectors and status gauge."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Tuple

from exporter.base.upstream import GENERIC_UPSTREAM, UpstreamWords
from exporter.collectors.collector import Collector, Flag, SourceState

if TYPE_CHECKING:  # `--help` and the flag tables load no section code
    from exporter.core.device_ids import DeviceForms
    from exporter.exposition.device_figures import FigureNames
    from exporter.exposition.families import Family
    from exporter.exposition.sections import VendorStatus


@dataclass(frozen=True)
class Vendor:
    """One GPU vendor, registered by one line in exporter/vendors (VENDORS). The framework knows this
    shape only: everything the vendor knows (resource names, its exporter's labels, its driver library)
    stays in its package, reached through these fields.

    `devices` are its kubelet resource names, device-ID forms and DRA driver (core.device_ids.DeviceForms):
    which allocated devices are its GPUs, and which sample labels each names. `figures` are its upstream
    exporter's names for the figures the core reads and the labels naming a device. `reader` is the collector that reads the vendor's upstream exporter (it offers the hub's `upstream`);
    `collectors` are its own (placed after the cluster context, whose pod index they may take).
    `open_resolver(driver)` makes the lazy resolver of the partition device IDs only its driver can
    name (None: none needed), whose first call may take up to `resolver_open_seconds`.
    """

    name: str
    devices: DeviceForms
    figures: FigureNames
    reader: type
    collectors: Tuple[type, ...] = ()
    upstream_words: UpstreamWords = GENERIC_UPSTREAM
    status: Optional[VendorStatus] = None  # what the status block writes in its words
    families: Tuple[Family, ...] = ()  # its own, for the catalogue
    open_resolver: Optional[Callable[[object], Callable]] = None
    resolver_open_seconds: float = 0.0
    # --gpu.vendor auto: paths whose presence on a node says it is this vendor's (its exporter's socket), from
    # the Config; looked at after its device-plugin resources and DRA driver (core.vendor_choice).
    marker_paths: Optional[Callable[[object], Tuple[str, ...]]] = None
    # `demo`'s simulated node of this vendor (an exporter.demo.simulated_node.SimulatedNode), made by a call
    # that imports the simulation only when the demo runs; None: `demo` cannot simulate this vendor.
    demo_node: Optional[Callable[[], object]] = None
    demo_flags: Tuple[Flag, ...] = ()  # flags of `demo` only, for its simulated node (listed last by --help)
    demo_refused: Mapping[str, str] = field(default_factory=dict)  # their Config fields → why serve, mapping refuse them
    upstream_failures: Optional[Family] = None  # /metrics: its name for the count of failed upstream fetches
    driver_timeouts: Optional[Family] = None  # /metrics: its name for calls into its driver cut at their bound
    # Config field → (a value, why a node of this vendor refuses it): another vendor's setting it cannot serve.
    refused_settings: Mapping[str, Tuple[object, str]] = field(default_factory=dict)


class UpstreamReader(Collector):
    """What every vendor's reader of its exporter shares: the source it put on the hub's `upstream` in
    prepare (kept in `_upstream`, a sources.upstream.tracked.Tracked), its state from that source's last
    fetch, and its address announced under its `name`."""

    def __init__(self) -> None:
        self._upstream = None  # the Tracked source, once prepared

    def state(self) -> SourceState:
        upstream = self._upstream
        if upstream is None or upstream.answered_at is None:
            return SourceState(self.name, False, (upstream.failure if upstream else None) or "not fetched yet")
        age = time.monotonic() - upstream.answered_at
        return SourceState(self.name, upstream.failure is None, upstream.failure, age)

    def announce(self) -> Mapping[str, object]:
        return {self.name: self._upstream.describe()} if self._upstream else {}
