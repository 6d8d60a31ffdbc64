"""The join of a kubelet's AMD device to its gpu_id, from the identity service's kept answer and the node's sysfs, both read on a refresher."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from exporter.vendors.amd.device_ids import DRA, DeviceRef
from exporter.vendors.amd.device_map import AmdGpu, Resolution, resolve
from exporter.vendors.amd.identity import AmdIdentity, IdentitySnapshot
from exporter.vendors.amd.sysfs_layout import SysfsLayout, read_layout

# sysfs changes with the GPUs themselves (a driver reload, a re-partition), and then the identity service's
# answer changes too (it lists each partition as a GPU of its own); a device the layout does not show makes
# the next refresh read it again too. Otherwise it is read again this often, in case, rather than on every
# refresh: a read costs several milliseconds on a node of 64 partitions, most of an idle AMD node's CPU.
LAYOUT_MAX_AGE_SECONDS = 60.0


class AmdResolver:
    """What the mapping asks of AMD's devices (AmdDeviceForms takes it as its resolver), answered from what the
    last `refresh` read: the identity service's answer (or the last good one it keeps) and the sysfs layout.

    `refresh` runs on the identity collector's refresher, never on a scrape nor while a mapping is built, so
    that a slow service costs no mapping its time. `generation` changes whenever what it read changes, so
    that the mapping is built again though the kubelet lists the same devices (an answer arriving late, a
    GPU turning unhealthy, the kept answer aging out).
    """

    def __init__(self, identity: AmdIdentity, sysfs_root: str, layout_max_age_seconds: float = LAYOUT_MAX_AGE_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._identity = identity
        self._sysfs_root = sysfs_root
        self._layout_max_age = layout_max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: IdentitySnapshot = identity.snapshot()
        self._layout = SysfsLayout()
        self._layout_read_at: Optional[float] = None
        self._layout_missed = False  # a device was looked up that the layout does not show
        self._generation = 0
        self.layout_reads = 0

    def refresh(self) -> None:
        """One List of the identity service, and a reading of sysfs when it may have changed (LAYOUT_MAX_AGE_SECONDS)."""
        self._identity.refresh()
        snapshot = self._identity.snapshot()
        with self._lock:
            layout = self._layout if self._layout_current(snapshot) else None
            self._layout_missed = False
        if layout is None:
            layout, self._layout_read_at = read_layout(self._sysfs_root), self._clock()
            self.layout_reads += 1
        with self._lock:
            if (snapshot.up, snapshot.states, layout.devices) != (self._snapshot.up, self._snapshot.states,
                                                                   self._layout.devices):
                self._generation += 1
            self._snapshot, self._layout = snapshot, layout

    def _layout_current(self, snapshot: IdentitySnapshot) -> bool:
        """Whether the last layout read may serve this refresh too (under the lock)."""
        return (self._layout_read_at is not None and not self._layout_missed
                and (snapshot.up, snapshot.states) == (self._snapshot.up, self._snapshot.states)
                and self._clock() - self._layout_read_at < self._layout_max_age)

    def generation(self) -> int:
        with self._lock:
            return self._generation

    def snapshot(self) -> IdentitySnapshot:
        """The identity service's state as the last refresh read it."""
        with self._lock:
            return self._snapshot

    def resolve(self, ref: DeviceRef) -> Optional[AmdGpu]:
        """The GPU or partition a device names, or None when it cannot be settled (device_map.resolve)."""
        return self.resolution(ref).gpu

    def resolution(self, ref: DeviceRef, slice_pci_address: str = "", slice_parent_address: str = "") -> Resolution:
        """device_map.resolve on what the last refresh read: the GPU, or why not, and its GPU's parts; the
        addresses are a DRA device's ResourceSlice's, when the Kubernetes API is read."""
        with self._lock:
            snapshot, layout = self._snapshot, self._layout
            if ref.name not in (layout.by_dra_name if ref.form == DRA else layout.by_device_id):
                self._layout_missed = True  # perhaps new since the last read: read it again on the next refresh
        return resolve(ref, layout, snapshot, slice_pci_address, slice_parent_address)

    def health(self, gpu_id: str) -> str:
        """healthy, unhealthy, or unknown while the service does not answer or does not list the GPU."""
        return self.snapshot().health(gpu_id)
