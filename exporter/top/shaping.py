"""The table as asked for: filtered by namespace and pod labels, grouped (--by), sorted (--sort) (pure)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from exporter.top.errors import TopSourceError
from exporter.top.table import DEVICE, HEALTH_ORDER, PROCESS, Row, Table
from exporter.top.utilization import weighted as weighted_by_gpus

GROUPINGS = ("pod", "namespace", "queue", "node", "cluster")
SORT_KEYS = ("sm", "gpus", "util", "memory", "power", "idle", "name")
# Every grouping keeps the cluster: two clusters' namespaces, queues and nodes of one name are not one.
# A row's names, in the order its columns show them: what --sort name sorts by (then the rest, for ties).
_NAME_KEYS: Dict[str, Tuple[str, ...]] = {
    "pod": ("cluster", "namespace", "pod", "container", "node"),
    "queue": ("cluster", "cluster_queue", "namespace", "local_queue"),
}
# And the vendor: UTIL is never averaged over two vendors' GPUs (a namespace holding both shows a row for each;
# a fleet of one vendor, or an exporter that does not say its vendor, groups as it always did).
_GROUP_KEYS: Dict[str, Tuple[str, ...]] = {
    "namespace": ("cluster", "namespace", "vendor"),
    "queue": ("cluster", "cluster_queue", "namespace", "local_queue", "vendor"),  # a LocalQueue is namespaced
    "node": ("cluster", "node", "vendor"),
    "cluster": ("cluster", "vendor"),
}
_SORT_FIELDS = {"sm": "sm_ratio", "gpus": "gpus", "util": "utilization", "memory": "memory_bytes",
                "power": "power_watts", "idle": "idle_ratio"}
# key=value, key==value, key!=value, key, !key: the equality forms of a Kubernetes label selector.
_REQUIREMENT = re.compile(r"\s*(!?)([A-Za-z0-9._/-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9._-]*))?\s*")
Requirement = Tuple[str, str, Optional[str]]  # operator (=, !=, exists, absent), key, value


def parse_selector(text: str) -> List[Requirement]:
    """A label selector's equality requirements; ValueError on anything else (set-based forms included)."""
    requirements: List[Requirement] = []
    for part in text.split(","):
        match = _REQUIREMENT.fullmatch(part)
        if not match or (match.group(1) and match.group(3)):
            raise ValueError(f"cannot read {part.strip()!r}: expected key=value, key!=value, key or !key")
        negated, key, operator, value = match.groups()
        kind = ("absent" if negated else "exists") if operator is None else ("!=" if operator == "!=" else "=")
        requirements.append((kind, key, value))
    return requirements


def selects(requirements: Sequence[Requirement], labels: Dict[str, str]) -> bool:
    checks: Dict[str, Callable[[str, Optional[str]], bool]] = {
        "exists": lambda key, _: key in labels, "absent": lambda key, _: key not in labels,
        "=": lambda key, value: labels.get(key) == value, "!=": lambda key, value: labels.get(key) != value}
    return all(checks[kind](_served_name(key), value) for kind, key, value in requirements)


def _served_name(key: str) -> str:
    """A pod label's key as the exporter's label_<key> carries it, sanitised like kube-state-metrics."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def shape(table: Table, namespace: Optional[str], selector: Sequence[Requirement], by: str, sort: str,
          cluster: Optional[str] = None) -> Table:
    if cluster is not None:
        table = _of_cluster(table, cluster)
    rows = [row for row in table.rows if namespace is None or row.namespace == namespace]
    if selector:
        if rows and not any(row.pod_labels for row in rows):
            raise TopSourceError("-l/--selector: the exporter serves no pod labels (start it with "
                                 "--labels.pod-labels naming the label keys to select on)", "no_labels")
        rows = [row for row in rows if selects(selector, {_served_name(k): v for k, v in row.pod_labels.items()})]
    unallocated = [entry for entry in table.unallocated if namespace is None or entry.namespace == namespace]
    if by != "pod":
        rows = grouped(rows, _GROUP_KEYS[by])
    return Table(sort_rows(rows, sort, by), unallocated, table.unattributed, table.unreachable)


def _of_cluster(table: Table, cluster: str) -> Table:
    """--cluster: that cluster's rows and footers alone."""
    def kept(entries):
        return [entry for entry in entries if entry.cluster == cluster]
    return Table(kept(table.rows), kept(table.unallocated), kept(table.unattributed), kept(table.unreachable))


def grouped(rows: List[Row], keys: Tuple[str, ...]) -> List[Row]:
    """One row per distinct value of `keys`: amounts added, idle and UTIL weighted by GPUs held, health the worst."""
    groups: Dict[tuple, List[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(getattr(row, key) for key in keys), []).append(row)
    return [_merged(dict(zip(keys, key)), members) for key, members in groups.items()]


def _merged(key: Dict[str, Optional[str]], members: List[Row]) -> Row:
    def total(name: str) -> Optional[float]:
        values = [getattr(row, name) for row in members if getattr(row, name) is not None]
        return sum(values) if values else None

    weighted = [(row.idle_ratio, row.gpus or 0.0) for row in members if row.idle_ratio is not None]
    weight = sum(gpus for _, gpus in weighted)
    idle = sum(ratio * gpus for ratio, gpus in weighted) / weight if weight else None
    healths = [row.health for row in members if row.health]
    sources = {row.sm_source for row in members if row.sm_source}
    empty = Row(None, None, None, None)
    return replace(empty, **key, gpus=total("gpus"), sm_ratio=total("sm_ratio"), memory_bytes=total("memory_bytes"),
                   power_watts=total("power_watts"), idle_ratio=idle,
                   utilization=weighted_by_gpus((row.utilization, row.gpus) for row in members),
                   health=min(healths, key=HEALTH_ORDER.index) if healths else None,
                   sm_source=(DEVICE if DEVICE in sources else PROCESS) if sources else None, containers=len(members),
                   rates_pending=any(row.rates_pending for row in members))


def sort_rows(rows: List[Row], sort: str, by: str = "pod") -> List[Row]:
    """Widest first (unknown values last); `name` sorts by the row's names as its columns show them (a pod's
    namespace, pod, container; its queue is no name of it); ties go by name."""
    keys = _NAME_KEYS.get(by) or _GROUP_KEYS[by]
    rest = tuple(key for key in ("cluster", "namespace", "pod", "container", "node", "cluster_queue", "local_queue",
                                 "vendor") if key not in keys)

    def name(row: Row) -> tuple:
        return tuple(getattr(row, key) or "" for key in keys + rest)

    by_name = sorted(rows, key=name)
    if sort == "name":
        return by_name
    attribute = _SORT_FIELDS[sort]
    return sorted(by_name, key=lambda row: (getattr(row, attribute) is None, -(getattr(row, attribute) or 0.0)))
