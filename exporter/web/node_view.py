"""The node page's NodeView, built from what the process already holds: never a request to any source per view."""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

from exporter.base.upstream import GENERIC_UPSTREAM
from exporter.core.allocated import allocated_gpus
from exporter.core.attribution import Snapshot
from exporter.core.health import DeviceHealth, combined_status
from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import Mapping
from exporter.exposition.device_figures import DeviceFigures, FigureNames, read_device_figures
from exporter.exposition.sections import SectionFailures
from exporter.web.node_page import (DEVICE_COLUMNS, HOLDER_COLUMNS, GpuRow, Holder, NodeView, Written,
                                    render_node_page, write_block, write_value)
from exporter.web.page_parts import Block, GpuColumn, HolderFigure, page_order
from exporter.web.routes import HEALTH_PATH, SELF_METRICS_PATH

MIB = 2**20
_Device = Tuple[str, str]  # (UUID, or "#" and the index, or "@" and the device name; GPU_I_ID)
# A switched-off collector's state reads down with this reason (collectors/registry.Registry.states).
OFF = "off"


# What a contribution's failure costs, as the log says it.
_LEFT_OFF = "is left off the node page until it works again"


class NodeInputs(NamedTuple):
    """One page view's reading of the process's state."""

    snapshot: Snapshot
    scraped: bool  # dcgm-exporter has answered a scrape since the process started
    figures: Dict[GpuIdentity, DeviceFigures]  # read from its last answer
    parts: Tuple[Tuple[str, Any], ...] = ()  # (collector, its PagePart) in registration order


class NodePage:
    """Serves / from the refresher's mapping, the scraper's last answer, the sources' states and what
    the collectors add (their `PagePart`s), each as the process already holds it."""

    def __init__(self, scraper, attribution, telemetry_path: str, sources=None):
        self._scraper = scraper
        self._attribution = attribution
        self._telemetry_path = telemetry_path
        # The collectors of this run (collectors/registry.Registry), known only by what they answer:
        # their page parts and the flags that switch them on; None: no collector.
        self._sources = sources
        # The vendor's names of the figures the page shows; None without collectors: no figures read.
        vendor = getattr(sources, "vendor", None)
        self._figure_names: Optional[FigureNames] = vendor.figures if vendor is not None else None
        self._upstream = vendor.upstream_words.name if vendor is not None else GENERIC_UPSTREAM.name
        # Each collector's part read, and each of its columns, figures and blocks written, on its own: one
        # that raises is left off the page (logged once while it keeps failing), never the page.
        self._failures = SectionFailures("collector", _LEFT_OFF)
        self._lock = threading.Lock()
        # The figures of the last body read, under that body's hash: never the body itself, which
        # would keep a second upstream answer alive beside the scraper's.
        self._figures: Tuple[Optional[int], Dict[GpuIdentity, DeviceFigures]] = (None, {})

    def render(self, states: Sequence) -> bytes:
        """The page, with `states` (App.source_states()) as its sources table: those switched off are
        named apart, with the flag that switches each on where its collector declares one."""
        parts = tuple(self._sources.page_parts()) if self._sources is not None else ()
        figures, scraped = self._figures_of(self._scraper.last_body)
        inputs = NodeInputs(self._attribution.current(), scraped, figures, parts)
        switches = self._sources.switches() if self._sources is not None else {}
        off = tuple((state.name, switches.get(state.name, "")) for state in states if _is_off(state))
        return render_node_page(dataclasses.replace(
            build_node_view(inputs, self._failures), sources=tuple(state for state in states if not _is_off(state)),
            sources_off=off, telemetry_path=self._telemetry_path, upstream=self._upstream,
            links=((SELF_METRICS_PATH, "this process's own metrics"), (HEALTH_PATH, "liveness"))))

    def _figures_of(self, body: Optional[bytes]) -> Tuple[Dict[GpuIdentity, DeviceFigures], bool]:
        """The body's figures, read once per body (a bytes object keeps its hash), and whether any scrape
        has answered. While the scraper rewrites a new body it holds none: the last figures stand."""
        with self._lock:
            read_hash, figures = self._figures
            if body is not None and hash(body) != read_hash:
                figures = read_device_figures(body, self._figure_names) if self._figure_names is not None else {}
                self._figures = (hash(body), figures)
            return figures, self._figures[0] is not None


def _is_off(state) -> bool:
    return not state.up and state.reason == OFF


class _Part(NamedTuple):
    """One collector's page part, read: the GPUs it names, and its contributions still to be written."""

    collector: str
    gpus: Tuple[GpuIdentity, ...]
    columns: tuple
    figures: tuple
    blocks: tuple


class _Theirs(NamedTuple):
    """Every collector's columns and figures, written, by device (the first collector's, where two fill one)."""

    cells: Dict[_Device, Dict[str, Written]]
    figures: Dict[Tuple[_Device, Owner], Dict[str, str]]
    columns: Tuple[str, ...]  # the headers besides the table's own, in the order first met
    holder_columns: Tuple[str, ...]


def build_node_view(inputs: NodeInputs, failures: Optional[SectionFailures] = None) -> NodeView:
    """The page's devices, holders, health, use and what the collectors add; sources and links are the
    caller's to add. Each collector's part is read, and each of its contributions written, under
    `failures`: one that raises is left out, and the rest of the page stands."""
    failures = failures or SectionFailures("collector", _LEFT_OFF)
    mapping = inputs.snapshot.mapping
    health = mapping.device_health
    parts = [part for part in (failures.run(name, "page part", functools.partial(_read_part, name, part), lambda: None)
                               for name, part in inputs.parts) if part is not None]
    devices = _devices(inputs, [gpu for part in parts for gpu in part.gpus], mapping, health)

    def named(identity: GpuIdentity) -> GpuIdentity:
        return devices.get(_device(identity), identity)

    theirs = _write_theirs(parts, named, failures)
    gpus = tuple(_row(identity, inputs, mapping, health, theirs) for identity in sorted(devices.values(), key=page_order))
    blocks = _write_blocks(parts, named, failures)
    node = next((figures.hostname for figures in inputs.figures.values() if figures.hostname), "")
    note = "" if inputs.scraped else "no scrape yet (they come with the first scrape of /gpu/metrics)"
    return NodeView(node, gpus, (), columns=theirs.columns, holder_columns=theirs.holder_columns, blocks=blocks,
                    unresolved=tuple(sorted(set(mapping.unresolved))), figures_note=note)


def _read_part(collector: str, part) -> _Part:
    """A page part's contributions and the GPUs it names, each checked to be of its kind."""
    columns, figures, blocks = tuple(part.columns), tuple(part.figures), tuple(part.blocks)
    gpus = (*part.devices, *(gpu for column in columns for gpu in column.cells),
            *(gpu for figure in figures for gpu, _ in figure.values))
    for values, kind in ((columns, GpuColumn), (figures, HolderFigure), (blocks, Block), (gpus, GpuIdentity)):
        stray = next((value for value in values if not isinstance(value, kind)), None)
        if stray is not None:
            raise TypeError(f"a page part holds a {type(stray).__name__} where a {kind.__name__} belongs")
    return _Part(collector, tuple(gpus), columns, figures, blocks)


def _write_theirs(parts: Sequence[_Part], named, failures: SectionFailures) -> _Theirs:
    theirs = _Theirs({}, {}, (), ())
    columns: Dict[str, None] = {}
    holder_columns: Dict[str, None] = {}
    for part in parts:
        for column in part.columns:
            _gather(failures.run(part.collector, f"column {column.name}", functools.partial(
                _write_column, column, named), lambda: None), column.name, theirs.cells, columns, DEVICE_COLUMNS)
        for figure in part.figures:
            _gather(failures.run(part.collector, f"figure {figure.name}", functools.partial(
                _write_figure, figure, named), lambda: None), figure.name, theirs.figures, holder_columns, HOLDER_COLUMNS)
    return theirs._replace(columns=tuple(columns), holder_columns=tuple(holder_columns))


def _gather(written: Optional[dict], name: str, into: dict, new: Dict[str, None], own: Sequence[str]) -> None:
    """One column's or figure's values, written (None: it raised), added where no earlier collector's stand;
    its name is a new column unless the table has one of that name."""
    if written is None:
        return
    for place, value in written.items():
        into.setdefault(place, {}).setdefault(name, value)
    if name not in own:
        new.setdefault(name)


def _write_blocks(parts: Sequence[_Part], named, failures: SectionFailures) -> Tuple[Tuple[str, str], ...]:
    blocks = []
    for part in parts:
        for block in part.blocks:
            written = failures.run(part.collector, f"block {block.title}", functools.partial(write_block, block, named), str)
            if written:
                blocks.append((block.place, written))
    return tuple(blocks)


def _write_column(column, named) -> Dict[_Device, Written]:
    return {_device(gpu): Written(write_value(cell.value, named), cell.state) for gpu, cell in column.cells.items()}


def _write_figure(figure, named) -> Dict[Tuple[_Device, Owner], str]:
    return {(_device(gpu), Owner(*holder)): write_value(value, named) for (gpu, holder), value in figure.values.items()}


def _device(identity: GpuIdentity) -> _Device:
    name = identity.uuid or (f"#{identity.gpu}" if identity.gpu else f"@{identity.device}")
    return (name, identity.instance)


def _merged(first: GpuIdentity, second: GpuIdentity) -> GpuIdentity:
    return GpuIdentity(*(mine or theirs for mine, theirs in zip(first, second)))


def _devices(inputs: NodeInputs, theirs: Sequence[GpuIdentity], mapping: Mapping,
             health: DeviceHealth) -> Dict[_Device, GpuIdentity]:
    """Every device of the node one reading names: the samples', the collectors', then keys the mapping
    or the API name that none of those carried (a held GPU missing from dcgm-exporter's answer)."""
    devices: Dict[_Device, GpuIdentity] = {}
    for identity in [*inputs.figures, *theirs]:
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


def _row(identity: GpuIdentity, inputs: NodeInputs, mapping: Mapping, health: DeviceHealth, theirs: _Theirs) -> GpuRow:
    figures = _figures_for(identity, inputs.figures)
    keys = set(identity.keys())
    statuses = [status for key, status in health.statuses.items() if key in keys]
    status = ""
    for one in statuses:
        status = combined_status(status or one, one)
    taints = tuple(sorted({f"{t.taint_key}={t.value}:{t.effect}" if t.value else f"{t.taint_key}:{t.effect}"
                           for t in health.taints if t.key in keys}))
    holders = _holders(identity, mapping, figures, theirs)
    used = None if figures.memory_used_mib is None else int(figures.memory_used_mib * MIB)
    total = figures.memory_total_mib
    util = figures.utilization_percent / 100 if figures.utilization_percent is not None else figures.engine_active_ratio
    return GpuRow(identity.gpu, identity.uuid, identity.instance, figures.model, status, taints, holders,
                  util, used, None if total is None else int(total * MIB), figures.power_watts, identity.device,
                  cells=tuple(theirs.cells.get(_device(identity), {}).items()))


def _figures_for(identity: GpuIdentity, figures: Dict[GpuIdentity, DeviceFigures]) -> DeviceFigures:
    found = figures.get(identity)
    if found is not None:
        return found
    return next((value for known, value in figures.items() if _device(known) == _device(identity)), DeviceFigures())


def _holders(identity: GpuIdentity, mapping: Mapping, figures: DeviceFigures, theirs: _Theirs) -> Tuple[Holder, ...]:
    """Its holders with their share of it, and their own memory, SM and power where known: the device's
    own figures for a device one container holds whole, and what the collectors measured of each (in
    process mode, its processes' memory and SM), which stands where both are known."""
    owners = mapping.owners_of(identity)
    keys = set(identity.keys())
    gpu_memory = {identity.uuid: figures.memory_total_mib} if figures.memory_total_mib else None
    held = allocated_gpus([a for a in mapping.allocations if a.key in keys], mapping.forms, mapping.offered, gpu_memory)
    alone = len(owners) == 1 and held.get(tuple(owners[0])) == 1.0 if owners else False
    memory = int(figures.memory_used_mib * MIB) if alone and figures.memory_used_mib is not None else None
    util = figures.utilization_percent
    sm = util / 100 if alone and util is not None else None
    return tuple(Holder(owner.namespace, owner.pod, owner.container, held.get(tuple(owner)), memory, sm,
                        figures.power_watts if alone else None,
                        figures=tuple(theirs.figures.get((_device(identity), owner), {}).items()))
                 for owner in owners)
