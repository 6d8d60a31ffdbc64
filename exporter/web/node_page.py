"""The node page at /: one NodeView (this node's GPUs, holders and sources) as plain HTML, every string escaped."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Iterable, List, Optional, Protocol, Sequence, Tuple

# A person glancing at a node wants what is true now; every 10 s is also the slowest a kubelet mapping
# refreshes by default, so a reload rarely shows the same page twice.
REFRESH_SECONDS = 10


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


@dataclass(frozen=True)
class GpuRow:
    """One GPU or MIG instance of this node ("" and None where unknown)."""

    index: str  # the NVML index (the gpu label)
    uuid: str
    instance: str = ""  # a MIG instance's GPU_I_ID
    model: str = ""
    health: str = ""  # healthy, unhealthy or unknown as the holders' pod status says; "" when none says
    taints: Tuple[str, ...] = ()  # "key=value:effect"
    lost: bool = False  # NVML answers that it fell off the bus
    holders: Tuple[Holder, ...] = ()
    utilization_ratio: Optional[float] = None  # the device's own, from dcgm-exporter
    memory_used_bytes: Optional[int] = None
    memory_total_bytes: Optional[int] = None
    power_watts: Optional[float] = None
    device: str = ""  # the device name ("nvidia0") where neither index nor UUID is known


@dataclass(frozen=True)
class UnallocatedUse:
    """A container's processes on a device it does not hold."""

    gpu: str  # how the device is named on the page ("2", "2/1" for a MIG instance)
    namespace: str
    pod: str
    container: str
    memory_bytes: Optional[int] = None
    sm_ratio: Optional[float] = None


@dataclass(frozen=True)
class NodeView:
    """Everything the page shows, read once from what the process holds."""

    node: str  # the node's name as dcgm-exporter's Hostname label gives it; "" when unknown
    gpus: Tuple[GpuRow, ...]
    sources: Tuple[SourceStateLike, ...]
    sources_off: Tuple[Tuple[str, str], ...] = ()  # (source, the flag that turns it on) of those not in use
    unallocated: Tuple[UnallocatedUse, ...] = ()
    unresolved: Tuple[str, ...] = ()  # device IDs the kubelet lists that no sample names
    figures_note: str = ""  # why device figures are missing ("no scrape yet"); "" when shown
    telemetry_path: str = "/gpu/metrics"
    links: Tuple[Tuple[str, str], ...] = ()  # (path, what it is), after the telemetry path


def render_node_page(view: NodeView, refresh_seconds: int = REFRESH_SECONDS) -> bytes:
    """The whole page: no script, no request to another host; it reloads itself every `refresh_seconds`."""
    title = f"GPUs of {view.node}" if view.node else "GPUs of this node"
    parts = [
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)} · pod-gpu-metrics-exporter</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>{_e(title)}</h1><p>pod-gpu-metrics-exporter: which pod holds each GPU. This page reloads "
        f"every {int(refresh_seconds)} s. {_links(view)}</p></header>",
        _sources(view.sources, view.sources_off),
        _gpus(view),
        _lost(view.gpus),
        _unheld(view),
        _unresolved(view.unresolved),
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
    head = ('<thead><tr><th colspan="8">the device</th><th colspan="5" class="holders">its holders</th></tr>'
            "<tr><th>GPU</th><th>UUID</th><th>model</th><th>health</th><th>taints</th><th>util</th>"
            '<th>memory</th><th>power</th><th class="holders">container</th><th>share</th><th>memory</th><th>SM</th>'
            "<th>power</th></tr></thead>")
    body = "".join(_gpu_rows(gpu) for gpu in view.gpus)
    return f"<section><h2>GPUs</h2>{note}<table class=\"gpus\">{head}{body}</table></section>"


def _gpu_rows(gpu: GpuRow) -> str:
    """One row per holder (or one for nobody), the device's own cells spanning them; a tbody per device."""
    holders: List[Optional[Holder]] = list(gpu.holders) or [None]
    span = f' rowspan="{len(holders)}"' if len(holders) > 1 else ""
    memory = _memory(gpu.memory_used_bytes, gpu.memory_total_bytes)
    own = "".join(f"<td{span}{cls}>{text}</td>" for cls, text in (
        ("", f"<b>{_e(gpu_name(gpu))}</b>"), (' class="uuid"', _e(gpu.uuid)), ("", _e(gpu.model)),
        (_health_class(gpu), _e(_health(gpu))), (' class="taints"', "<br>".join(_breakable(taint) for taint in gpu.taints)),
        ("", _e(_percent(gpu.utilization_ratio))), ("", _e(memory)), ("", _e(_watts(gpu.power_watts)))))
    rows = []
    for position, holder in enumerate(holders):
        cells = own if position == 0 else ""
        rows.append(f"<tr>{cells}{_holder_cells(holder)}</tr>")
    return f"<tbody class=\"{'lost' if gpu.lost else 'gpu'}\">{''.join(rows)}</tbody>"


def _holder_cells(holder: Optional[Holder]) -> str:
    if holder is None:
        return '<td class="nobody">nobody</td><td></td><td></td><td></td><td></td>'
    return (f"<td>{_e(holder.namespace)}/<b>{_e(holder.pod)}</b>/{_e(holder.container)}</td>"
            f"<td>{_e(_percent(holder.share))}</td><td>{_e(_bytes(holder.memory_bytes))}</td>"
            f"<td>{_e(_percent(holder.sm_ratio))}</td><td>{_e(_watts(holder.power_watts))}</td>")


def _lost(gpus: Iterable[GpuRow]) -> str:
    lost = [gpu for gpu in gpus if gpu.lost]
    if not lost:
        return ""
    items = "".join(f"<li><b>GPU {_e(gpu_name(gpu))}</b> {_e(gpu.uuid)}: NVML reports it lost (fallen off the bus "
                    "or unreachable)</li>" for gpu in lost)
    return f"<section><h2>Lost GPUs</h2><ul class=\"lost\">{items}</ul></section>"


def _unheld(view: NodeView) -> str:
    free = [gpu for gpu in view.gpus if not gpu.holders]
    items = "".join(f"<li>GPU {_e(gpu_name(gpu))} {_e(gpu.uuid)}</li>" for gpu in free)
    listed = f"<ul>{items}</ul>" if free else "<p>Every GPU is held.</p>" if view.gpus else ""
    use = ""
    if view.unallocated:
        rows = "".join(f"<tr><td>{_e(use.gpu)}</td><td>{_e(use.namespace)}/<b>{_e(use.pod)}</b>/{_e(use.container)}"
                       f"</td><td>{_e(_bytes(use.memory_bytes))}</td><td>{_e(_percent(use.sm_ratio))}</td></tr>"
                       for use in view.unallocated)
        use = ("<h3>Used without being held</h3><table><thead><tr><th>GPU</th><th>container</th><th>memory</th>"
               f"<th>SM</th></tr></thead><tbody>{rows}</tbody></table>")
    return f"<section><h2>Held by nobody</h2>{listed}{use}</section>"


def _unresolved(devices: Sequence[str]) -> str:
    if not devices:
        return ""
    items = "".join(f"<li><code>{_e(device)}</code></li>" for device in devices)
    return ("<section><h2>Unresolved devices</h2><p>Allocated, yet no dcgm-exporter sample names them:</p>"
            f"<ul>{items}</ul></section>")


def gpu_name(gpu: GpuRow) -> str:
    """How the page names a device: its index, "index/instance" for a MIG instance, else its device name."""
    name = gpu.index or gpu.device or "?"
    return f"{name}/{gpu.instance}" if gpu.instance else name


def _health(gpu: GpuRow) -> str:
    return "lost" if gpu.lost else gpu.health or "not reported"


def _health_class(gpu: GpuRow) -> str:
    bad = gpu.lost or gpu.health == "unhealthy"
    return ' class="down"' if bad else ' class="up"' if gpu.health == "healthy" else ""


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


_STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#1d2129;background:#fff}"
    "h1{font-size:1.5em;margin:0}h2{font-size:1.15em;margin:1.4em 0 .4em}h3{font-size:1em}"
    "header p{color:#555;margin:.3em 0}nav{display:inline}a{color:#0b57d0}"
    "table{border-collapse:collapse}th,td{border:1px solid #d0d4da;padding:.25em .45em;text-align:left;"
    "vertical-align:top;white-space:nowrap}thead th{background:#f0f2f5}td.uuid{font:11px monospace}"
    "td.taints{white-space:normal}"
    "th.holders,table.gpus td:nth-last-child(5){border-left:2px solid #8a919c}"
    ".up{color:#137333;font-weight:600}.down{color:#b3261e;font-weight:700}.nobody{color:#777;font-style:italic}"
    "tbody.lost td{background:#fdecea}ul.lost{color:#b3261e}.note{color:#555}"
)
