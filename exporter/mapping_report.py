"""The `mapping` command's output: the GPU → owner mapping as an aligned table or as JSON."""

from __future__ import annotations

import json
from typing import Optional

from exporter.core.identity import SampleDialect
from exporter.core.mapping import Mapping
from exporter.exposition.labels import DEFAULT_DIALECT
from exporter.exposition.text import render_label_pairs


def print_report(api_version: str, mapping: Mapping, output: str, with_labels: bool,
                 dialect: SampleDialect = DEFAULT_DIALECT) -> None:
    """Print `mapping`'s allocations as `output` says: "json", or an aligned table; `with_labels` adds
    each pod's extra labels from the Kubernetes API. What each device matches is named in the vendor's
    labels (`dialect`)."""
    rows = [
        {
            "namespace": a.owner.namespace,
            "pod": a.owner.pod,
            "container": a.owner.container,
            "resource": a.resource,
            "device_id": a.device_id,
            "matches": _describe_key(a.key, dialect),
            **({"labels": render_label_pairs(mapping.extra_labels.get((a.owner.namespace, a.owner.pod), ()))}
               if with_labels else {}),
        }
        for a in mapping.allocations
    ]
    if output == "json":
        print(json.dumps({"api_version": api_version, "allocations": rows}, indent=2))
    else:
        _print_table(rows)


def _describe_key(key, dialect: SampleDialect) -> Optional[str]:
    if key is None:
        return None
    text = f'{dialect.label_for(key.label) or key.label}="{key.value}"'
    instance = next((label for field, label in dialect.written if field == "instance"), "")
    return text + f',{instance}="{key.instance}"' if key.instance else text


def _print_table(rows) -> None:
    columns = ("namespace", "pod", "container", "resource", "device_id", "matches")
    if rows and "labels" in rows[0]:
        columns += ("labels",)  # the extra labels from the Kubernetes API
    cells = [[c.upper() for c in columns]]
    cells += [[str(row[c] or ("-" if c == "labels" else "(unresolved)")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
    if not rows:
        print("(no GPU is allocated to any container on this node)")
