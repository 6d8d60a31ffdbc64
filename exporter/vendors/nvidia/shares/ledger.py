"""The share counters kept from one refresh to the next: energy per holder and per reason, idle seconds per holder."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

from exporter.core.identity import GpuIdentity, Owner
from exporter.vendors.nvidia.shares.compute import DeviceShares, PodIndex, Shares
from exporter.vendors.nvidia.shares.energy import split_gpu_energy

HolderKey = Tuple[GpuIdentity, Owner]
# A device NVML failed to read (a GPU lost for a moment) keeps its counters this many refreshes, so
# that they carry on rather than restart from 0 when it answers again; then they are forgotten
# (a MIG instance destroyed, a GPU gone for good).
FORGET_UNREAD_AFTER_REFRESHES = 12


class Counters(NamedTuple):
    """What the counters read after one refresh, for rendering."""

    holder_energy_mj: Dict[HolderKey, int]  # holders of devices whose GPU reports energy
    unattributed_energy_mj: Dict[Tuple[GpuIdentity, str], int]
    idle_seconds: Dict[HolderKey, float]  # every holder of every device read


class ShareLedger:
    """Counters that only grow while their holder holds the device, and whose series go when it leaves.

    A holder is one container of one pod UID on one device: a pod re-created under the same name (a
    StatefulSet's) is a new holder and starts again from 0, as Prometheus expects of a new process.
    Each GPU's energy counter is read once per refresh; the difference from the last reading is split
    (energy.split_gpu_energy) and added, so over any stretch of refreshes the counters of a GPU grow by
    exactly what NVML says the board used. The first reading of a GPU, and one lower than the last (the
    driver reloaded and its counter restarted), only set the baseline.
    """

    def __init__(self, idle_policy: str):
        self._idle_policy = idle_policy
        self._baseline_mj: Dict[str, int] = {}  # GPU UUID → its energy counter at the last refresh
        self._uids: Dict[HolderKey, str] = {}  # the pod UID each holder's counters belong to ("" not yet known)
        self._energy: Dict[HolderKey, int] = {}  # mJ
        self._unattributed: Dict[Tuple[GpuIdentity, str], int] = {}
        self._idle: Dict[HolderKey, float] = {}
        self._unread: Dict[GpuIdentity, int] = {}  # devices with counters, refreshes in a row not read
        self._last_at: Optional[float] = None

    def update(self, shares: Shares, pods: PodIndex, now: float) -> Counters:
        """Add one refresh's energy and idle time; returns every counter of the devices read."""
        elapsed = 0.0 if self._last_at is None else max(now - self._last_at, 0.0)
        self._last_at = now
        held = {(share.device, share.owner): share for share in shares.holders}
        kept = self._unread_devices_kept({entry.device for entry in shares.devices})
        self._follow_pod_uids(held, pods, kept)
        # A holder seen for the first time starts at 0: it was not known to hold the device before.
        idle = {key: (self._idle[key] + (elapsed if share.processes == 0 else 0.0)) if key in self._idle else 0.0
                for key, share in held.items()}
        self._idle = {**{key: value for key, value in self._idle.items() if key[0] in kept}, **idle}
        # Holders of a device read that no longer hold it lose their counters: their series go.
        energy_devices = [entry for entry in shares.devices if entry.energy_mj is not None]
        metered = {entry.device for entry in energy_devices}
        self._energy = {**{key: mj for key, mj in self._energy.items() if key[0] in kept},
                        **{key: self._energy.get(key, 0) for key in held if key[0] in metered}}
        self._unattributed = {key: mj for key, mj in self._unattributed.items() if key[0] in metered or key[0] in kept}
        for uuid, instances in _by_gpu(energy_devices).items():
            self._add_energy(uuid, instances)
        return Counters(dict(self._energy), dict(self._unattributed), dict(self._idle))

    def _unread_devices_kept(self, read: set) -> set:
        """The devices with counters that this refresh did not read and whose counters are still kept."""
        with_counters = {key[0] for key in (*self._energy, *self._idle, *self._unattributed)}
        self._unread = {device: self._unread.get(device, 0) + 1 for device in with_counters | set(self._unread)
                        if device not in read}
        self._unread = {device: count for device, count in self._unread.items()
                        if count <= FORGET_UNREAD_AFTER_REFRESHES}
        return set(self._unread)

    def _follow_pod_uids(self, held: Dict[HolderKey, object], pods: PodIndex, kept: set) -> None:
        """Forget the counters of a holder whose pod was re-created under the same name (another UID).
        A UID the API did not know yet, then learns, is the same holder: its counters carry on."""
        uids = {(pod.namespace, pod.pod): uid for uid, pod in pods.items()}
        known = {key: uid for key, uid in self._uids.items() if key[0] in kept}
        for key in held:
            uid, before = uids.get((key[1].namespace, key[1].pod), ""), self._uids.get(key, "")
            if uid and before and uid != before:
                self._energy.pop(key, None)
                self._idle.pop(key, None)
            known[key] = uid or before
        self._uids = known

    def _add_energy(self, uuid: str, instances: List[DeviceShares]) -> None:
        reading = instances[0].energy_mj
        last = self._baseline_mj.get(uuid)
        self._baseline_mj[uuid] = reading
        delta = 0 if last is None or reading < last else reading - last
        split = split_gpu_energy(delta, instances, self._idle_policy)
        for key, mj in split.holders.items():
            self._energy[key] = self._energy.get(key, 0) + mj
        for key, mj in split.unattributed.items():
            self._unattributed[key] = self._unattributed.get(key, 0) + mj


def _by_gpu(devices: List[DeviceShares]) -> Dict[str, List[DeviceShares]]:
    grouped: Dict[str, List[DeviceShares]] = {}
    for entry in devices:
        grouped.setdefault(entry.device.uuid, []).append(entry)
    return grouped
