"""XID counters per device and per holding container, kept from NVML's events, and their series as text."""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Optional, Set, Tuple

from exporter.core.identity import GpuIdentity, Owner
from exporter.core.mapping import Mapping
from exporter.exposition.families import (CONTAINER_XID_ERRORS, DEVICE_LOST, DEVICE_XID_ERRORS, XID_EVENTS_UP,
                                          render_status)
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import gpu_label_pairs, render_owner_labels_within
from exporter.exposition.text import LabelPairs, escape_label_value, render_label_pairs
from exporter.sources.nvml.events import EventsStatus, XidEvent

_HolderKey = Tuple[GpuIdentity, Owner, LabelPairs, str]  # device, holder, its extras then, XID


class XidCounters:
    """Counts each XID on its device and on the containers that held it when the event arrived.

    The holders are read from the mapping in use at that moment: an event naming a MIG instance
    counts on that instance's holders; one naming no instance counts on every holder of the GPU,
    its MIG instances' included (an XID such as 79, the GPU fallen off the bus, stops them all),
    under the labels of the device the event named. A container's counters stay while the exporter
    runs, after it has left the GPU too: a counter that vanished and came back would read as a reset,
    and XIDs are rare enough that the series they leave are few.
    """

    def __init__(self, current_mapping: Callable[[], Mapping], status: Callable[[], EventsStatus], style: str,
                 label_limit: Optional[LabelLimit] = None):
        self._current_mapping = current_mapping
        self._status = status
        self._style = style
        self._label_limit = label_limit
        self._lock = threading.Lock()
        self._devices: Dict[Tuple[GpuIdentity, str], int] = {}
        self._holders: Dict[_HolderKey, int] = {}

    def record(self, event: XidEvent) -> None:
        """Called on the event thread for each XID event."""
        mapping = self._current_mapping()
        holders = holders_of(mapping, event.device)
        with self._lock:
            key = (event.device, event.xid)
            self._devices[key] = self._devices.get(key, 0) + 1
            for owner in holders:
                extras = tuple(mapping.extra_labels.get((owner.namespace, owner.pod), ()))
                holder = (event.device, owner, extras, event.xid)
                self._holders[holder] = self._holders.get(holder, 0) + 1

    def text(self) -> bytes:
        """What a scrape appends: the counters with samples, the lost GPUs, and whether events are up."""
        status = self._status()
        with self._lock:
            devices, holders = sorted(self._devices.items()), sorted(self._holders.items())
        lines: List[str] = []
        if devices:
            lines.append(DEVICE_XID_ERRORS.header)
            lines += [f"{DEVICE_XID_ERRORS.name}{{{_device(gpu)},{_xid(xid)}}} {count}\n"
                      for (gpu, xid), count in devices]
        if holders:
            lines.append(CONTAINER_XID_ERRORS.header)
            lines += [f"{CONTAINER_XID_ERRORS.name}{{{self._holder(gpu, owner, extras)},{_xid(xid)}}} {count}\n"
                      for (gpu, owner, extras, xid), count in holders]
        if status.lost:
            lines.append(DEVICE_LOST.header)
            lines += [f"{DEVICE_LOST.name}{{{_device(gpu)}}} 1\n" for gpu in sorted(status.lost)]
        return ("".join(lines) + render_status([(XID_EVENTS_UP, int(status.up))])).encode()

    def _holder(self, gpu: GpuIdentity, owner: Owner, extras: LabelPairs) -> str:
        own = len(gpu_label_pairs(gpu)) + 1  # the device's labels and xid always stay
        return _device(gpu) + "," + render_owner_labels_within(owner, self._style, extras, self._label_limit, own)


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


def _device(gpu: GpuIdentity) -> str:
    return render_label_pairs(gpu_label_pairs(gpu))


def _xid(xid: str) -> str:
    return f'xid="{escape_label_value(xid)}"'
