"""The one writer of the rows the exporter writes itself: a catalogue entry plus label values → its text.

Label names and their order come from the family's entry (Family.label_order), never from the caller:
a value for a label the entry does not declare, or none for one it requires, is a bug and raises.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Tuple

from exporter.exposition.families import DEVICE_ORDER, OWNER, Family
from exporter.exposition.text import escape_label_value

Row = Tuple[str, object]  # (label text from label_text, value)


def label_text(family: Family, values: Mapping[str, str], owner: str = "",
               device: Tuple[Tuple[str, str], ...] = ()) -> str:
    """`name="value",…` of one row, in the entry's order: each required label (an empty value too), each
    optional one that has a value; `owner`, the owner labels already written in the --labels.style and
    followed by the pod's extras (labels.render_owner_labels_within), where the entry puts its owner;
    `device`, a device's labels in the vendor's dialect (labels.device_label_pairs), in their order where
    the entry puts its device (its DEVICE_ORDER names, which are the labels' names on NVIDIA nodes)."""
    unknown = set(values) - set(family.label_order)
    if unknown:
        raise ValueError(f"{family.name} has no label {sorted(unknown)}")
    if device and not set(DEVICE_ORDER) & set(family.label_order):
        raise ValueError(f"{family.name} names no device")
    parts = []
    for name in family.label_order:
        if name in OWNER:
            if name == OWNER[0] and owner:  # the owner block's place; its names depend on the style
                parts.append(owner)
            continue
        if device and name in DEVICE_ORDER:  # the device block's place; its names depend on the vendor
            parts.extend(f'{label}="{escape_label_value(value)}"' for label, value in device)
            device = ()
            continue
        value = values.get(name)
        if value is None and name in family.labels:
            raise ValueError(f"{family.name} needs label {name}")
        if value or (value is not None and name in family.labels):
            parts.append(f'{name}="{escape_label_value(value)}"')
    return ",".join(parts)


def render_family(family: Family, rows: Iterable[Row]) -> str:
    """The family's HELP and TYPE lines, then one line per row; "" when there is none (a family with no
    sample is not written at all)."""
    name = family.name
    lines = [f"{name}{{{labels}}} {value}\n" if labels else f"{name} {value}\n" for labels, value in rows]
    return family.header + "".join(lines) if lines else ""
