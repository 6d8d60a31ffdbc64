"""The join of a kubelet's AMD device to its gpu_id, from the identity service's kept answer and the node's sysfs, both read on a refresher."""

from __future__ import annotations

import threading
from typing import Optional

from exporter.vendors.amd.device_ids import DeviceRef
from exporter.vendors.amd.device_map import AmdGpu, resolve
from exporter.vendors.amd.identity import AmdIdentity, IdentitySnapshot
from exporter.vendors.amd.sysfs_layout import SysfsLayout, read_layout


class AmdResolver:
    """What the mapping asks of AMD's devices (AmdDeviceForms takes it as its resolver), answered from what the
    last `refresh` read: the identity service's answer (or the last good one it keeps) and the sysfs layout.

    `refresh` runs on the identity collector's refresher, never on a scrape nor while a mapping is built, so
    that a slow service costs no mapping its time. `generation` changes whenever what it read changes, so
    that the mapping is built again though the kubelet lists the same devices (an answer arriving late, a
    GPU turning unhealthy, the kept answer aging out).
    """

    def __init__(self, identity: AmdIdentity, sysfs_root: str):
        self._identity = identity
        self._sysfs_root = sysfs_root
        self._lock = threading.Lock()
        self._snapshot: IdentitySnapshot = identity.snapshot()
        self._layout = SysfsLayout()
        self._generation = 0

    def refresh(self) -> None:
        """One List of the identity service and one reading of sysfs."""
        self._identity.refresh()
        snapshot, layout = self._identity.snapshot(), read_layout(self._sysfs_root)
        with self._lock:
            if (snapshot.up, snapshot.states, layout.devices) != (self._snapshot.up, self._snapshot.states,
                                                                   self._layout.devices):
                self._generation += 1
            self._snapshot, self._layout = snapshot, layout

    def generation(self) -> int:
        with self._lock:
            return self._generation

    def snapshot(self) -> IdentitySnapshot:
        """The identity service's state as the last refresh read it."""
        with self._lock:
            return self._snapshot

    def resolve(self, ref: DeviceRef) -> Optional[AmdGpu]:
        """The GPU or partition a device names, or None when it cannot be settled (device_map.resolve)."""
        with self._lock:
            snapshot, layout = self._snapshot, self._layout
        return resolve(ref, layout, snapshot).gpu

    def health(self, gpu_id: str) -> str:
        """healthy, unhealthy, or unknown while the service does not answer or does not list the GPU."""
        return self.snapshot().health(gpu_id)
