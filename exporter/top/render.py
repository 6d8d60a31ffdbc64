"""The table written out: aligned text with its footers, JSON ({"rows", "unallocated", "unattributed"}) or CSV (pure)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from exporter.top.table import DEVICE, Row, Table

OUTPUTS = ("table", "json", "csv")
ROW_FIELDS = ("cluster", "namespace", "pod", "container", "node", "gpus", "sm_ratio", "memory_bytes", "power_watts",
              "idle_ratio", "health", "cluster_queue", "local_queue", "sm_source", "utilization")
# The columns naming a row, for each --by; the amounts follow. CLUSTER leads them once rows of more than
# one cluster are shown: on one cluster, the table is the one it always was.
_NAME_COLUMNS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "pod": (("NAMESPACE", "namespace"), ("POD", "pod"), ("CONTAINER", "container"), ("NODE", "node")),
    "namespace": (("NAMESPACE", "namespace"),),
    "queue": (("CLUSTER-QUEUE", "cluster_queue"), ("NAMESPACE", "namespace"), ("LOCAL-QUEUE", "local_queue")),
    "node": (("NODE", "node"),),
    "cluster": (("CLUSTER", "cluster"),),
}
_CLUSTER_COLUMN = ("CLUSTER", "cluster")
# Follows the names once rows of more than one GPU vendor are shown: a single-vendor fleet's table is unchanged.
_VENDOR_COLUMN = ("VENDOR", "vendor")
_DEVICE_NOTE = ("* the GPU's own utilisation and memory (--sharing.mode device): on a shared GPU, "
                "every holder shows the whole GPU")
# A `-` is otherwise a value the exporter does not serve: this one is a rate that needs one more sample.
_PENDING_NOTE = ("- in POWER or IDLE of {rows}: not enough data yet, fewer than two samples of their counters "
                 "within the window (a rate needs two): wait a scrape, or widen --window")


def render(table: Table, output: str, by: str) -> str:
    if output == "json":
        return json.dumps(as_json(table, by), indent=2, allow_nan=False) + "\n"
    if output == "csv":
        return as_csv(table, by)
    return as_text(table, by)


def as_json(table: Table, by: str) -> dict:
    rows = [_row_object(row, by) for row in table.rows]
    unallocated = [{"cluster": u.cluster, "namespace": u.namespace, "pod": u.pod, "container": u.container,
                    "node": u.node, "memory_bytes": _whole(u.memory_bytes), "sm_ratio": u.sm_ratio}
                   for u in table.unallocated]
    unattributed = [{"cluster": u.cluster, "node": u.node, "reason": u.reason, "memory_bytes": _whole(u.memory_bytes),
                     "sm_ratio": u.sm_ratio, "power_watts": u.power_watts} for u in table.unattributed]
    unreachable = [{"cluster": u.cluster, "node": u.node or None, "error": u.error} for u in table.unreachable]
    return {"rows": _known_values(rows), "unallocated": _known_values(unallocated),
            "unattributed": _known_values(unattributed), "unreachable": unreachable}


def _known(value):
    """None for NaN and ±Inf (a series may carry them; Prometheus answers "NaN"): JSON has no such number."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _known_values(objects: List[dict]) -> List[dict]:
    return [{name: _known(value) for name, value in entry.items()} for entry in objects]


def _row_object(row: Row, by: str) -> dict:
    found = {name: getattr(row, name) for name in ROW_FIELDS}
    found["memory_bytes"] = _whole(row.memory_bytes)
    found["vendor"] = row.vendor
    if by != "pod":
        found["containers"] = row.containers
    return found


def several_clusters(table: Table) -> bool:
    """Whether the rows shown come from more than one cluster (a row of none counts as one of its own)."""
    return len({row.cluster for row in table.rows}) > 1


def several_vendors(table: Table) -> bool:
    """Whether the rows shown hold GPUs of more than one vendor (rows whose vendor is not said are not counted)."""
    return len({row.vendor for row in table.rows} - {None}) > 1


def as_csv(table: Table, by: str) -> str:
    out = io.StringIO()
    named = several_clusters(table) or by == "cluster"
    fields = ROW_FIELDS[0 if named else 1:] + (() if by == "pod" else ("containers",)) + (
        ("vendor",) if several_vendors(table) else ())
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        found = _known_values([_row_object(row, by)])[0]
        writer.writerow({k: "" if found[k] is None else found[k] for k in fields})
    return out.getvalue()


def as_text(table: Table, by: str) -> str:
    names = _NAME_COLUMNS[by]
    if by != "cluster" and several_clusters(table):
        names = (_CLUSTER_COLUMN,) + names
    if several_vendors(table):
        names = names + (_VENDOR_COLUMN,)
    header = [title for title, _ in names] + ([] if by == "pod" else ["CONTAINERS"]) + [
        "GPUS", "SM", "UTIL", "MEMORY", "POWER", "IDLE", "HEALTH"] + (["QUEUE"] if by == "pod" else [])
    lines = [header] + [_cells(row, names, by) for row in table.rows]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = ["   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
    if not table.rows:
        text.append("(no container holds a GPU)")
    return "\n".join(text + footer(table)) + "\n"


def _cells(row: Row, names: Sequence[Tuple[str, str]], by: str) -> List[str]:
    cells = [getattr(row, attribute) or "-" for _, attribute in names]
    if by != "pod":
        cells.append(str(row.containers))
    mark = "*" if row.sm_source == DEVICE else ""
    cells += [number(row.gpus), _ratio(row.sm_ratio) + (mark if row.sm_ratio is not None else ""),
              percent(row.utilization),
              size(row.memory_bytes) + (mark if row.memory_bytes is not None and mark else ""),
              watts(row.power_watts), percent(row.idle_ratio), row.health or "-"]
    if by == "pod":
        cells.append("/".join(q for q in (row.cluster_queue, row.local_queue) if q) or "-")
    return cells


def footer(table: Table) -> List[str]:
    """What no row shows: the remainder nobody holds, use outside allocations, nodes that did not answer."""
    lines = [""] if table.unattributed or table.unallocated or table.unreachable else []
    named = several_clusters(table)  # a node's cluster is said where the rows say it
    pending = sum(1 for row in table.rows if row.rates_pending)
    if pending:
        lines.insert(0, _PENDING_NOTE.format(rows="1 row" if pending == 1 else f"{pending} rows"))
    if any(row.sm_source == DEVICE for row in table.rows):
        lines.insert(0, _DEVICE_NOTE)
    if table.unattributed:
        lines.append("Unattributed (held by no container, or used by none of its holders): " + _by_reason(table))
    if table.unallocated:
        lines.append("Using a GPU nobody gave them:")
        lines += [f"  {u.namespace}/{u.pod}/{u.container} on {_where(u.cluster if named else None, u.node)}: memory "
                  f"{size(u.memory_bytes)}, SM {_ratio(u.sm_ratio)}" for u in table.unallocated]
    if table.unreachable:
        lines.append(f"Not answering ({len(table.unreachable)}): " +
                     "; ".join(f"{_where(u.cluster if named or not u.node else None, u.node)} ({u.error})"
                               for u in table.unreachable))
    return lines


def _where(cluster: Optional[str], node: str) -> str:
    """A node, with its cluster where it has one (a whole cluster that failed: its name alone)."""
    if not cluster:
        return node
    return f"{cluster}/{node}" if node else f"cluster {cluster}"


def _by_reason(table: Table) -> str:
    reasons: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for entry in table.unattributed:
        for name in ("memory_bytes", "sm_ratio", "power_watts"):
            if getattr(entry, name) is not None:
                reasons[entry.reason][name] += getattr(entry, name)
    parts = []
    for reason, amounts in sorted(reasons.items()):
        shown = [text for text, value in (("memory " + size(amounts.get("memory_bytes")), amounts.get("memory_bytes")),
                                          ("SM " + _ratio(amounts.get("sm_ratio")), amounts.get("sm_ratio")),
                                          (watts(amounts.get("power_watts")), amounts.get("power_watts"))) if value]
        parts.append(f"{reason} {', '.join(shown)}")
    return "; ".join(parts)


def _whole(value: Optional[float]) -> Optional[int]:
    """Bytes as a whole number (Prometheus answers every value as a float)."""
    return None if value is None or not math.isfinite(value) else int(round(value))


def number(value: Optional[float]) -> str:
    return "-" if _known(value) is None else f"{value:.2f}".rstrip("0").rstrip(".")


def _ratio(value: Optional[float]) -> str:
    return "-" if _known(value) is None else f"{value:.2f}"


def percent(value: Optional[float]) -> str:
    return "-" if _known(value) is None else f"{100 * value:.0f}%"


def watts(value: Optional[float]) -> str:
    return "-" if _known(value) is None else f"{value:.1f}W"


def size(value: Optional[float]) -> str:
    if _known(value) is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}B"
