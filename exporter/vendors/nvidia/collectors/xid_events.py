"""NVML's XID events as a collector: --health.xid-events, the event thread and its counters' section."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from exporter.collectors.collector import Collector, Flag, Hub, PagePart, SourceState
from exporter.vendors.nvidia.collectors import DEMO_SETS_NVML
from exporter.vendors.nvidia.families import XID_EVENTS

XID_EVENTS_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class XidEventsOptions:
    """Whether XID events are counted (--health.xid-events on, or auto in --sharing.mode process), and the
    owner label names their holders' counters carry (--labels.style)."""

    counted: bool
    labels_style: str


class XidEventsCollector(Collector):
    """NVML's XID error events counted per GPU and per holder (auto: in --sharing.mode process)."""

    name = "xid_events"
    switch = XID_EVENTS
    section_sources = {"xid_events": "NVML"}
    flags = (
        Flag("--health.xid-events", "health_xid_events", XID_EVENTS_CHOICES, "Count NVML's XID error events per GPU and per holding container (needs NVML): auto = in --sharing.mode process; on; off.",
             "auto"),
    )
    refused = {
        "demo": {"health_xid_events": DEMO_SETS_NVML},
        "mapping": {"health_xid_events": "XID events are counted while serving, never printed by it"},
    }

    def __init__(self) -> None:
        self._events = None

    def options(self, config) -> XidEventsOptions:
        counted = config.health_xid_events == "on" or (config.health_xid_events == "auto"
                                                       and config.sharing_mode == "process")
        return XidEventsOptions(counted, config.labels_style)

    def enabled(self, config) -> bool:
        return self.options(config).counted

    def build(self, hub: Hub) -> None:
        from exporter.vendors.nvidia.shares.xid_events import XidEvents
        from exporter.vendors.nvidia.nvml.library import open_nvml

        # The trusted mapping the shares attribute by: once the kubelet's has aged out it is None, and no
        # holder is then taken to have left (an empty mapping would read as every holder gone).
        self._events = XidEvents(functools.partial(open_nvml, hub.driver), hub.attribution.mapping_in_use,
                                 self.options(hub.config).labels_style, hub.label_limit)

    def start(self) -> None:
        self._events.start()

    def stop(self) -> None:
        self._events.stop()

    def sections(self):
        from exporter.exposition.sections import TextSection

        return (TextSection("xid_events", self._events.text, self._events.state),)

    def state(self) -> SourceState:
        up = self._events.state().up
        return SourceState(self.name, up, None if up else "no GPU registered for events, or the last wait failed")

    def page_part(self) -> PagePart:
        """The GPUs NVML answered lost when they were last registered for events."""
        return lost_page_part(self._events.lost())


def lost_page_part(lost) -> PagePart:
    """Lost GPUs as the node page shows them: "lost" in their health cell, their rows shaded, and listed."""
    from exporter.web.page_parts import LOST, Block, Cell, GpuColumn, page_order

    gone = sorted(lost, key=page_order)
    return PagePart(columns=(GpuColumn("health", {gpu: Cell("lost", LOST) for gpu in gone}),), blocks=(
        Block("Lost GPUs", tuple((gpu, ": NVML reports it lost (fallen off the bus or unreachable)") for gpu in gone),
              state=LOST),))
