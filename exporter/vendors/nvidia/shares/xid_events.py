"""--health.xid-events: the event thread and the XID counters it feeds, started and stopped together."""

from __future__ import annotations

from typing import Callable, FrozenSet, Optional

from exporter.core.identity import GpuIdentity
from exporter.core.mapping import Mapping
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.sections import SectionState
from exporter.vendors.nvidia.shares.xid_counters import XidCounters
from exporter.vendors.nvidia.nvml.events import XidEventWatcher


class XidEvents:
    """NVML's XID events counted on their devices and holders; `text` is what a scrape appends."""

    def __init__(self, open_nvml: Callable[[], tuple], mapping_in_use: Callable[[], Optional[Mapping]], style: str,
                 label_limit: Optional[LabelLimit] = None):
        self._watcher = XidEventWatcher(open_nvml, self._record)
        self._counters = XidCounters(mapping_in_use, self._watcher.status, style, label_limit)

    def _record(self, event) -> None:
        self._counters.record(event)

    def text(self) -> bytes:
        return self._counters.text()

    def lost(self) -> FrozenSet[GpuIdentity]:
        """The GPUs NVML answered GPU_IS_LOST for when last registered."""
        return self._watcher.status().lost

    def state(self) -> SectionState:
        """Up while a GPU is registered for events and the last wait answered; events are waited for,
        not refreshed, so there is no refresh duration."""
        return SectionState(self._watcher.status().up, None)

    def start(self) -> None:
        self._watcher.start()

    def stop(self) -> None:
        self._watcher.stop()
