"""XID counters per device and per holding container, kept from NVML's events, and their series as text."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

from exporter.base.logs import LogOnce, log
from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import EMPTY_MAPPING, Mapping
from exporter.exposition.families import Family, render_status
from exporter.vendors.nvidia.families import CONTAINER_XID_ERRORS, DEVICE_LOST, DEVICE_XID_ERRORS, XID_EVENTS_UP
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import gpu_label_pairs, render_owner_labels_within
from exporter.exposition.rows import label_text, render_family
from exporter.exposition.text import LabelPairs
from exporter.vendors.nvidia.nvml.events import EventsStatus, XidEvent

_HolderKey = Tuple[GpuIdentity, Owner, LabelPairs, str]  # device, holder, its extras then, XID
# A container's counters outlive its pod's leaving the mapping by this long: long enough for the alert
# on their growth to have fired and for a dashboard to show who was hit, and a bound on pods that churn.
HOLDER_RETENTION_SECONDS = 3600.0
MOST_HOLDER_SERIES = 10_000  # past this, the series whose pods left the longest ago go first


class XidCounters:
    """Counts each XID on its device and on the containers that held it when the event arrived.

    The holders are read from the trusted mapping in use at that moment (Attribution.mapping_in_use, as
    the shares read it; None while there is none to trust): an event naming a MIG instance
    counts on that instance's holders; one naming no instance counts on every holder of the GPU,
    its MIG instances' included (an XID such as 79, the GPU fallen off the bus, stops them all),
    under the labels of the device the event named. A container's counters stay after it has left the
    GPU (a counter that vanished and came back would read as a reset) until its pod has been out of the
    mapping for `retention_seconds`, as seen at scrapes; while there is no trusted mapping (the kubelet
    gone past --kubelet.mapping-max-age) nobody is seen to leave, so an outage neither forgets a holder
    nor makes its counter restart from 0. At most `most_series` are kept, the series
    whose pods left the longest ago dropped first (counted in `dropped_series`, said once).
    """

    def __init__(self, mapping_in_use: Callable[[], Optional[Mapping]], status: Callable[[], EventsStatus], style: str,
                 label_limit: Optional[LabelLimit] = None, retention_seconds: float = HOLDER_RETENTION_SECONDS,
                 most_series: int = MOST_HOLDER_SERIES, clock: Callable[[], float] = time.monotonic):
        self._mapping_in_use = mapping_in_use
        self._status = status
        self._style = style
        self._label_limit = label_limit
        self._retention, self._most, self._clock = retention_seconds, most_series, clock
        self._lock = threading.Lock()
        self._devices: Dict[Tuple[GpuIdentity, str], int] = {}
        self._holders: Dict[_HolderKey, List[float]] = {}  # → [count, when its pod was last in the mapping]
        self._over_most = LogOnce()
        self.dropped_series = 0  # series dropped past `most_series` since start

    def record(self, event: XidEvent) -> None:
        """Called on the event thread for each XID event."""
        mapping = self._mapping_in_use() or EMPTY_MAPPING  # no trusted mapping: counted on the device only
        holders = holders_of(mapping, event.device)
        now = self._clock()
        with self._lock:
            key = (event.device, event.xid)
            self._devices[key] = self._devices.get(key, 0) + 1
            for owner in holders:
                extras = tuple(mapping.extra_labels.get((owner.namespace, owner.pod), ()))
                held = self._holders.setdefault((event.device, owner, extras, event.xid), [0, now])
                held[0], held[1] = held[0] + 1, now
            self._drop_past_most()

    def text(self) -> bytes:
        """What a scrape appends: the counters with samples, the lost GPUs, and whether events are up."""
        status = self._status()
        with self._lock:
            mapping = self._mapping_in_use() if self._holders else None
            if mapping is not None:  # without a trusted one, no holder is known to have left
                self._forget_departed(mapping)
            devices = sorted(self._devices.items())
            holders = sorted((key, int(held[0])) for key, held in self._holders.items())
        text = (render_family(DEVICE_XID_ERRORS, ((_labels(DEVICE_XID_ERRORS, gpu, xid=xid), count)
                                                  for (gpu, xid), count in devices))
                + render_family(CONTAINER_XID_ERRORS, ((self._holder(gpu, owner, extras, xid), count)
                                                       for (gpu, owner, extras, xid), count in holders))
                + render_family(DEVICE_LOST, ((_labels(DEVICE_LOST, gpu), 1) for gpu in sorted(status.lost))))
        return (text + render_status([(XID_EVENTS_UP, int(status.up))])).encode()

    def _forget_departed(self, mapping: Mapping) -> None:
        """Marks the series of pods in the mapping seen now; drops those of pods gone past the retention."""
        now = self._clock()
        present = {(owner.namespace, owner.pod) for owners in mapping.owners.values() for owner in owners}
        for key in list(self._holders):
            held = self._holders[key]
            if (key[1].namespace, key[1].pod) in present:
                held[1] = now
            elif now - held[1] > self._retention:
                del self._holders[key]

    def _drop_past_most(self) -> None:
        excess = len(self._holders) - self._most
        if excess <= 0:
            return
        for key in sorted(self._holders, key=lambda key: (self._holders[key][1], key))[:excess]:
            del self._holders[key]
        self.dropped_series += excess
        self._over_most.log("most", "warn", "more containers have XID counters than are kept: those whose pods "
                            "left the longest ago are dropped", most=self._most)
        log("debug", "XID counters dropped past the most kept", dropped=excess, dropped_total=self.dropped_series)

    def _holder(self, gpu: GpuIdentity, owner: Owner, extras: LabelPairs, xid: str) -> str:
        own = len(gpu_label_pairs(gpu)) + 1  # the device's labels and xid always stay
        owner_text = render_owner_labels_within(owner, self._style, extras, self._label_limit, own)
        return label_text(CONTAINER_XID_ERRORS, dict(gpu_label_pairs(gpu), xid=xid), owner_text)


def holders_of(mapping: Mapping, device: GpuIdentity) -> Tuple[Owner, ...]:
    """A MIG instance's holders, or a whole GPU's with those of every MIG instance on it; sorted."""
    if device.instance:
        return mapping.owners_of(device)
    names = {(key.label, key.value) for key in device.keys()}
    found: Set[Owner] = set()
    for key, owners in mapping.owners.items():
        if (key.label, key.value) in names:
            found.update(owners)
    return tuple(sorted(found))


def _labels(family: Family, gpu: GpuIdentity, **values: str) -> str:
    return label_text(family, dict(gpu_label_pairs(gpu), **values))
