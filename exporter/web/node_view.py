"""The node page's NodeView, built from what the process already holds: never a request to any source per view."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, FrozenSet, Iterable, NamedTuple, Optional, Sequence, Tuple

from exporter.core.allocated import allocated_gpus
from exporter.core.attribution import Snapshot
from exporter.core.health import DeviceHealth, combined_status
from exporter.core.identity import GpuIdentity, GpuKey
from exporter.core.mapping import Mapping
from exporter.exposition.device_figures import DeviceFigures, read_device_figures
from exporter.web.node_page import GpuRow, Holder, NodeView, UnallocatedUse, gpu_name, render_node_page
from exporter.web.routes import HEALTH_PATH, SELF_METRICS_PATH

MIB = 2**20
_Device = Tuple[str, str]  # (UUID, or "#" and the index, or "@" and the device name; GPU_I_ID)
# A switched-off collector's state reads down with this reason (collectors/registry.Registry.states).
OFF = "off"


class NodeInputs(NamedTuple):
    """One page view's reading of the process's state."""

    snapshot: Snapshot
    scraped: bool  # dcgm-exporter has answered a scrape since the process started
    figures: Dict[GpuIdentity, DeviceFigures]  # read from its last answer
    shares: Any  # each holder's measured share (shares/compute.Shares) from a collector's page part, or None
    lost: FrozenSet[GpuIdentity]


class NodePage:
    """Serves / from the refresher's mapping, the scraper's last answer, the sources' states and what
    the collectors add (their `PagePart`s), each as the process already holds it."""

    def __init__(self, scraper, attribution, telemetry_path: str, sources=None):
        self._scraper = scraper
        self._attribution = attribution
        self._telemetry_path = telemetry_path
        # The collectors of this run (collectors/registry.Registry), known only by what they answer:
        # their page part and the flags that switch them on; None: no collector.
        self._sources = sources
        self._lock = threading.Lock()
        # The figures of the last body read, under that body's hash: never the body itself, which
        # would keep a second upstream answer alive beside the scraper's.
        self._figures: Tuple[Optional[int], Dict[GpuIdentity, DeviceFigures]] = (None, {})

    def render(self, states: Sequence) -> bytes:
        """The page, with `states` (App.source_states()) as its sources table: those switched off are
        named apart, with the flag that switches each on where its collector declares one."""
        part = self._sources.page_part() if self._sources is not None else None
        figures, scraped = self._figures_of(self._scraper.last_body)
        inputs = NodeInputs(self._attribution.current(), scraped, figures,
                            part.shares if part else None, part.lost if part else frozenset())
        switches = self._sources.switches() if self._sources is not None else {}
        off = tuple((state.name, switches.get(state.name, "")) for state in states if _is_off(state))
        return render_node_page(dataclasses.replace(
            build_node_view(inputs), sources=tuple(state for state in states if not _is_off(state)),
            sources_off=off, telemetry_path=self._telemetry_path,
            links=((SELF_METRICS_PATH, "this process's own metrics"), (HEALTH_PATH, "liveness"))))

    def _figures_of(self, body: Optional[bytes]) -> Tuple[Dict[GpuIdentity, DeviceFigures], bool]:
        """The body's figures, read once per body (a bytes object keeps its hash), and whether any scrape
        has answered. While the scraper rewrites a new body it holds none: the last figures stand."""
        with self._lock:
            read_hash, figures = self._figures
            if body is not None and hash(body) != read_hash:
                figures = read_device_figures(body)
                self._figures = (hash(body), figures)
            return figures, self._figures[0] is not None


def _is_off(state) -> bool:
    return not state.up and state.reason == OFF


def build_node_view(inputs: NodeInputs) -> NodeView:
    """The page's devices, holders, health and use; sources and links are the caller's to add."""
    mapping = inputs.snapshot.mapping
    health = mapping.device_health
    devices = _devices(inputs, mapping, health)
    gpus = tuple(sorted((_row(identity, inputs, mapping, health) for identity in devices.values()), key=_order))
    node = next((figures.hostname for figures in inputs.figures.values() if figures.hostname), "")
    unallocated = tuple(_unallocated(inputs.shares, devices)) if inputs.shares else ()
    note = "" if inputs.scraped else "no scrape yet (they come with the first scrape of /gpu/metrics)"
    return NodeView(node, gpus, (), unallocated=unallocated, unresolved=tuple(sorted(set(mapping.unresolved))),
                    figures_note=note)


def _device(identity: GpuIdentity) -> _Device:
    name = identity.uuid or (f"#{identity.gpu}" if identity.gpu else f"@{identity.device}")
    return (name, identity.instance)


def _merged(first: GpuIdentity, second: GpuIdentity) -> GpuIdentity:
    return GpuIdentity(*(mine or theirs for mine, theirs in zip(first, second)))


def _devices(inputs: NodeInputs, mapping: Mapping, health: DeviceHealth) -> Dict[_Device, GpuIdentity]:
    """Every device of the node one reading names: the samples', NVML's, then keys the mapping or the
    API name that none of those carried (a held GPU missing from dcgm-exporter's answer)."""
    share_devices = [entry.device for entry in inputs.shares.devices] if inputs.shares else []
    devices: Dict[_Device, GpuIdentity] = {}
    for identity in [*inputs.figures, *inputs.lost, *share_devices]:
        devices[_device(identity)] = _merged(devices.get(_device(identity), identity), identity)
    claimed = {key for identity in devices.values() for key in identity.keys()}
    keys = [*mapping.owners, *health.statuses, *(taint.key for taint in health.taints)]
    for key in keys:
        if key not in claimed:
            identity = _identity_of_key(key)
            devices.setdefault(_device(identity), identity)
            claimed.add(key)
    return devices


def _identity_of_key(key: GpuKey) -> GpuIdentity:
    names = {"UUID": 0, "gpu": 1, "device": 2}
    fields = ["", "", "", key.instance]
    fields[names.get(key.label, 2)] = key.value
    return GpuIdentity(*fields)


def _row(identity: GpuIdentity, inputs: NodeInputs, mapping: Mapping, health: DeviceHealth) -> GpuRow:
    figures = _figures_for(identity, inputs.figures)
    keys = set(identity.keys())
    statuses = [status for key, status in health.statuses.items() if key in keys]
    status = ""
    for one in statuses:
        status = combined_status(status or one, one)
    taints = tuple(sorted({f"{t.taint_key}={t.value}:{t.effect}" if t.value else f"{t.taint_key}:{t.effect}"
                           for t in health.taints if t.key in keys}))
    lost = any(_device(gone) == _device(identity) for gone in inputs.lost)
    holders = _holders(identity, inputs, mapping, figures)
    used = None if figures.memory_used_mib is None else int(figures.memory_used_mib * MIB)
    total = figures.memory_total_mib
    util = figures.utilization_percent / 100 if figures.utilization_percent is not None else figures.engine_active_ratio
    return GpuRow(identity.gpu, identity.uuid, identity.instance, figures.model, status, taints, lost, holders,
                  util, used, None if total is None else int(total * MIB), figures.power_watts, identity.device)


def _figures_for(identity: GpuIdentity, figures: Dict[GpuIdentity, DeviceFigures]) -> DeviceFigures:
    found = figures.get(identity)
    if found is not None:
        return found
    return next((value for known, value in figures.items() if _device(known) == _device(identity)), DeviceFigures())


def _holders(identity: GpuIdentity, inputs: NodeInputs, mapping: Mapping,
             figures: DeviceFigures) -> Tuple[Holder, ...]:
    """Its holders with their share of it, and their own memory, SM and power where known: measured per
    process in process mode; the device's own figures for a device one container holds whole."""
    owners = mapping.owners_of(identity)
    keys = set(identity.keys())
    gpu_memory = {identity.uuid: figures.memory_total_mib} if figures.memory_total_mib else None
    held = allocated_gpus([a for a in mapping.allocations if a.key in keys], mapping.offered, gpu_memory)
    measured = {share.owner: share for entry in (inputs.shares.devices if inputs.shares else ())
                if _device(entry.device) == _device(identity) for share in entry.holders}
    alone = len(owners) == 1 and held.get(tuple(owners[0])) == 1.0 if owners else False
    holders = []
    for owner in owners:
        share = measured.get(owner)
        memory = share.memory_bytes if share else (int(figures.memory_used_mib * MIB) if alone and
                                                   figures.memory_used_mib is not None else None)
        util = figures.utilization_percent
        sm = share.sm_ratio if share else (util / 100 if alone and util is not None else None)
        holders.append(Holder(owner.namespace, owner.pod, owner.container, held.get(tuple(owner)), memory, sm,
                              figures.power_watts if alone else None))
    return tuple(holders)


def _unallocated(shares, devices: Dict[_Device, GpuIdentity]) -> Iterable[UnallocatedUse]:
    for use in shares.unallocated:
        identity = devices.get(_device(use.device), use.device)
        yield UnallocatedUse(gpu_name(GpuRow(identity.gpu, identity.uuid, identity.instance, device=identity.device)),
                             use.owner.namespace, use.owner.pod, use.owner.container, use.memory_bytes, use.sm_ratio)


def _order(row: GpuRow) -> tuple:
    index = int(row.index) if row.index.isdigit() else 1 << 30
    return (index, row.index, row.uuid, row.device, int(row.instance) if row.instance.isdigit() else 0)
