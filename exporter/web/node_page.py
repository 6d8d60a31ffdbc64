"""The node page at /: one NodeView (this node's GPUs, holders and sources) as plain HTML, every string escaped."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable, List, NamedTuple, Optional, Protocol, Sequence, Tuple

from exporter.base.upstream import GENERIC_UPSTREAM
from exporter.core.identity import GpuIdentity, Owner
from exporter.web.page_parts import BYTES, DOWN, LOST, RATIO, UP, WATTS, WITH_UNHELD, Amount, Block, Value

# A person glancing at a node wants what is true now; every 10 s is also the slowest a kubelet mapping
# refreshes by default, so a reload rarely shows the same page twice.
REFRESH_SECONDS = 10
# The GPU table's own columns: a contributed column or figure of one of these names fills it instead.
DEVICE_COLUMNS = ("GPU", "UUID", "model", "health", "taints", "util", "memory", "power")
HOLDER_COLUMNS = ("container", "share", "memory", "SM", "power")


class SourceStateLike(Protocol):
    """One source's state (a collectors/collector.SourceState): up, or why not, and how old its data is."""

    name: str
    up: bool
    reason: Optional[str]
    age_seconds: Optional[float]


@dataclass(frozen=True)
class Holder:
    """One container holding a device, with what is known of its use of it (None: not known)."""

    namespace: str
    pod: str
    container: str
    share: Optional[float] = None  # of the device: 1 for a whole one, 0.25 for one of four replicas
    memory_bytes: Optional[int] = None
    sm_ratio: Optional[float] = None
    power_watts: Optional[float] = None
    figures: Tuple[Tuple[str, str], ...] = ()  # (name, its cell written) of the collectors' figures


class Written(NamedTuple):
    """A collector's cell, written already (escaped), and what it says of its GPU (page_parts.UP, …)."""

    html: str
    state: str = ""


@dataclass(frozen=True)
class GpuRow:
    """One GPU or MIG instance of this node ("" and None where unknown)."""

    index: str  # the NVML index (the gpu label)
    uuid: str
    instance: str = ""  # a MIG instance's GPU_I_ID
    model: str = ""
    health: str = ""  # healthy, unhealthy or unknown as the holders' pod status says; "" when none says
    taints: Tuple[str, ...] = ()  # "key=value:effect"
    holders: Tuple[Holder, ...] = ()
    utilization_ratio: Optional[float] = None  # the device's own, from dcgm-exporter
    memory_used_bytes: Optional[int] = None
    memory_total_bytes: Optional[int] = None
    power_watts: Optional[float] = None
    device: str = ""  # the device name ("nvidia0") where neither index nor UUID is known
    cells: Tuple[Tuple[str, Written], ...] = ()  # (header, its cell) of the collectors' columns

    @property
    def lost(self) -> bool:
        """A collector's cell says the device is gone: its rows are shaded."""
        return any(cell.state == LOST for _, cell in self.cells)


@dataclass(frozen=True)
class NodeView:
    """Everything the page shows, read once from what the process holds."""

    node: str  # the node's name as the upstream exporter's samples give it; "" when unknown
    gpus: Tuple[GpuRow, ...]
    sources: Tuple[SourceStateLike, ...]
    sources_off: Tuple[Tuple[str, str], ...] = ()  # (source, the flag that turns it on) of those not in use
    columns: Tuple[str, ...] = ()  # the collectors' columns of each device besides DEVICE_COLUMNS
    holder_columns: Tuple[str, ...] = ()  # and of each holder besides HOLDER_COLUMNS
    blocks: Tuple[Tuple[str, str], ...] = ()  # (place, the block written) of the collectors' blocks
    unresolved: Tuple[str, ...] = ()  # device IDs the kubelet lists that no sample names
    figures_note: str = ""  # why device figures are missing ("no scrape yet"); "" when shown
    upstream: str = GENERIC_UPSTREAM.name  # how the page names the vendor's exporter (UpstreamWords.name)
    telemetry_path: str = "/gpu/metrics"
    links: Tuple[Tuple[str, str], ...] = ()  # (path, what it is), after the telemetry path


def render_node_page(view: NodeView, refresh_seconds: int = REFRESH_SECONDS) -> bytes:
    """The whole page: no script, no request to another host; it reloads itself every `refresh_seconds`."""
    title = f"GPUs of {view.node}" if view.node else "GPUs of this node"
    parts = [
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)} · pod-gpu-metrics-exporter</title><style>{_style(view)}</style></head><body>",
        f"<header><h1>{_e(title)}</h1><p>pod-gpu-metrics-exporter: which pod holds each GPU. This page reloads "
        f"every {int(refresh_seconds)} s. {_links(view)}</p></header>",
        _sources(view.sources, view.sources_off),
        _gpus(view),
        *(block for place, block in view.blocks if place != WITH_UNHELD),
        _unheld(view),
        _unresolved(view.unresolved, view.upstream),
        "</body></html>\n",
    ]
    return "".join(parts).encode()


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _breakable(text: str) -> str:
    """Escaped, and allowed to wrap after a slash: a taint key is one long word otherwise."""
    return _e(text).replace("/", "/<wbr>")


def _links(view: NodeView) -> str:
    links = ((view.telemetry_path, "GPU metrics with their holders"),) + view.links
    return "<nav>" + " · ".join(f'<a href="{_e(path)}">{_e(path)}</a> {_e(what)}' for path, what in links) + "</nav>"


def _sources(sources: Sequence[SourceStateLike], off: Sequence[Tuple[str, str]]) -> str:
    rows = "".join(
        f"<tr><th scope=\"row\">{_e(source.name)}</th>"
        f"<td class=\"{'up' if source.up else 'down'}\">{'up' if source.up else 'down'}</td>"
        f"<td>{_e(_age(source.age_seconds))}</td><td>{_e(source.reason or '')}</td></tr>"
        for source in sources)
    named = (f"{_e(name)} (turned on by {_e(flag)})" if flag else f"{_e(name)} (off)" for name, flag in off)
    unused = f"<p class=\"note\">Not in use: {'; '.join(named)}.</p>" if off else ""
    return ("<section><h2>Sources</h2><table><thead><tr><th>source</th><th>state</th><th>data age</th>"
            f"<th>why</th></tr></thead><tbody>{rows}</tbody></table>{unused}</section>")


def _gpus(view: NodeView) -> str:
    note = f"<p class=\"note\">Device figures: {_e(view.figures_note)}.</p>" if view.figures_note else ""
    if not view.gpus:
        return f"<section><h2>GPUs</h2>{note}<p>No GPU known yet.</p></section>"
    device, holder = (*DEVICE_COLUMNS, *view.columns), (*HOLDER_COLUMNS, *view.holder_columns)
    head = (f'<thead><tr><th colspan="{len(device)}">the device</th><th colspan="{len(holder)}" class="holders">its '
            f"holders</th></tr><tr>{''.join(f'<th>{_e(name)}</th>' for name in device)}"
            f'<th class="holders">{_e(holder[0])}</th>{"".join(f"<th>{_e(name)}</th>" for name in holder[1:])}'
            "</tr></thead>")
    body = "".join(_gpu_rows(gpu, view) for gpu in view.gpus)
    return f"<section><h2>GPUs</h2>{note}<table class=\"gpus\">{head}{body}</table></section>"


def _gpu_rows(gpu: GpuRow, view: NodeView) -> str:
    """One row per holder (or one for nobody), the device's own cells spanning them; a tbody per device."""
    holders: List[Optional[Holder]] = list(gpu.holders) or [None]
    span = f' rowspan="{len(holders)}"' if len(holders) > 1 else ""
    memory = _memory(gpu.memory_used_bytes, gpu.memory_total_bytes)
    own = (("", f"<b>{_e(gpu_name(gpu))}</b>"), (' class="uuid"', _e(gpu.uuid)), ("", _e(gpu.model)),
           (_health_class(gpu), _e(_health(gpu))), (' class="taints"', "<br>".join(_breakable(taint) for taint in gpu.taints)),
           ("", _e(_percent(gpu.utilization_ratio))), ("", _e(memory)), ("", _e(_watts(gpu.power_watts))))
    theirs = dict(gpu.cells)
    cells = [_their_cell(theirs[name]) if name in theirs else mine for name, mine in zip(DEVICE_COLUMNS, own)]
    cells += [_their_cell(theirs.get(name, Written(""))) for name in view.columns]
    device = "".join(f"<td{span}{cls}>{text}</td>" for cls, text in cells)
    rows = []
    for position, holder in enumerate(holders):
        rows.append(f"<tr>{device if position == 0 else ''}{_holder_cells(holder, view.holder_columns)}</tr>")
    return f"<tbody class=\"{'lost' if gpu.lost else 'gpu'}\">{''.join(rows)}</tbody>"


def _their_cell(cell: Written) -> Tuple[str, str]:
    state = {UP: "up", DOWN: "down", LOST: "down"}.get(cell.state)
    return (f' class="{state}"' if state else "", cell.html)


def _holder_cells(holder: Optional[Holder], extra: Sequence[str]) -> str:
    if holder is None:
        return '<td class="nobody">nobody</td>' + "<td></td>" * (len(HOLDER_COLUMNS) - 1 + len(extra))
    mine = (f"{_e(holder.namespace)}/<b>{_e(holder.pod)}</b>/{_e(holder.container)}", _e(_percent(holder.share)),
            _e(_bytes(holder.memory_bytes)), _e(_percent(holder.sm_ratio)), _e(_watts(holder.power_watts)))
    theirs = dict(holder.figures)
    cells = [theirs.get(name, own) for name, own in zip(HOLDER_COLUMNS, mine)] + [theirs.get(name, "") for name in extra]
    return "".join(f"<td>{cell}</td>" for cell in cells)


def _unheld(view: NodeView) -> str:
    free = [gpu for gpu in view.gpus if not gpu.holders]
    items = "".join(f"<li>GPU {_e(gpu_name(gpu))} {_e(gpu.uuid)}</li>" for gpu in free)
    listed = f"<ul>{items}</ul>" if free else "<p>Every GPU is held.</p>" if view.gpus else ""
    theirs = "".join(block for place, block in view.blocks if place == WITH_UNHELD)
    return f"<section><h2>Held by nobody</h2>{listed}{theirs}</section>"


def _unresolved(devices: Sequence[str], upstream: str) -> str:
    if not devices:
        return ""
    items = "".join(f"<li><code>{_e(device)}</code></li>" for device in devices)
    return (f"<section><h2>Unresolved devices</h2><p>Allocated, yet no {_e(upstream)} sample names them:</p>"
            f"<ul>{items}</ul></section>")


# How a contribution names a GPU: the identity the page merged from every reading of that device.
Naming = Callable[[GpuIdentity], GpuIdentity]


def write_value(value: Value, named: Naming, in_list: bool = False) -> str:
    """One value of a collector's cell, figure or block, escaped; TypeError for what the page cannot write."""
    if value is None:
        return ""
    if isinstance(value, Amount):
        return _e({BYTES: _bytes, RATIO: _percent, WATTS: _watts}[value.unit](value.number))
    if isinstance(value, GpuIdentity):
        gpu = named(value)
        name = gpu_name(GpuRow(gpu.gpu, gpu.uuid, gpu.instance, device=gpu.device))
        return f"<b>GPU {_e(name)}</b> {_e(gpu.uuid)}" if in_list else _e(name)
    if isinstance(value, Owner):
        return f"{_e(value.namespace)}/<b>{_e(value.pod)}</b>/{_e(value.container)}"
    if isinstance(value, str):
        return _e(value)
    raise TypeError(f"the node page writes no {type(value).__name__}")


def write_block(block: Block, named: Naming) -> str:
    """A collector's block: a section after the GPU table, or a part of "Held by nobody"; "" without rows."""
    rows = [tuple(row) for row in block.rows]
    if not rows:
        return ""
    cls = f' class="{_e(block.state)}"' if block.state else ""
    if block.columns:
        head = "".join(f"<th>{_e(name)}</th>" for name in block.columns)
        body = "".join("<tr>" + "".join(f"<td>{write_value(value, named)}</td>" for value in row) + "</tr>"
                       for row in rows)
        content = f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    else:
        items = "".join("<li>" + "".join(write_value(value, named, in_list=True) for value in row) + "</li>"
                        for row in rows)
        content = f"<ul{cls}>{items}</ul>"
    if block.place == WITH_UNHELD:
        return f"<h3>{_e(block.title)}</h3>{content}"
    return f"<section><h2>{_e(block.title)}</h2>{content}</section>"


def gpu_name(gpu: GpuRow) -> str:
    """How the page names a device: its index, "index/instance" for a MIG instance, else its device name."""
    name = gpu.index or gpu.device or "?"
    return f"{name}/{gpu.instance}" if gpu.instance else name


def _health(gpu: GpuRow) -> str:
    return gpu.health or "not reported"


def _health_class(gpu: GpuRow) -> str:
    return ' class="down"' if gpu.health == "unhealthy" else ' class="up"' if gpu.health == "healthy" else ""


def _age(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _percent(ratio: Optional[float]) -> str:
    return "" if ratio is None else f"{ratio * 100:.0f} %"


def _watts(watts: Optional[float]) -> str:
    return "" if watts is None else f"{watts:.1f} W"


def _bytes(count: Optional[int]) -> str:
    return "" if count is None else f"{count / 2**30:.1f} GiB"


def _memory(used: Optional[int], total: Optional[int]) -> str:
    if used is None:
        return ""
    return _bytes(used) if total is None else f"{used / 2**30:.1f} / {_bytes(total)}"


def _style(view: NodeView) -> str:
    # The first holder column is ruled off from the device's: counted from the row's end, as a device's
    # own cells are in its first row only.
    first_holder = len(HOLDER_COLUMNS) + len(view.holder_columns)
    return (f"{_STYLE_HEAD}th.holders,table.gpus td:nth-last-child({first_holder}){{border-left:2px solid #8a919c}}"
            f"{_STYLE_TAIL}")


_STYLE_HEAD = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#1d2129;background:#fff}"
    "h1{font-size:1.5em;margin:0}h2{font-size:1.15em;margin:1.4em 0 .4em}h3{font-size:1em}"
    "header p{color:#555;margin:.3em 0}nav{display:inline}a{color:#0b57d0}"
    "table{border-collapse:collapse}th,td{border:1px solid #d0d4da;padding:.25em .45em;text-align:left;"
    "vertical-align:top;white-space:nowrap}thead th{background:#f0f2f5}td.uuid{font:11px monospace}"
    "td.taints{white-space:normal}"
)
_STYLE_TAIL = (
    ".up{color:#137333;font-weight:600}.down{color:#b3261e;font-weight:700}.nobody{color:#777;font-style:italic}"
    "tbody.lost td{background:#fdecea}ul.lost{color:#b3261e}.note{color:#555}"
)
