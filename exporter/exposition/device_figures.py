"""Pure: each device's model and a few device-level figures, read from one upstream answer by the vendor's figure names."""

from __future__ import annotations

import functools
import re
from typing import Dict, NamedTuple, Optional, Tuple

from exporter.core.identity import GpuIdentity, SampleDialect
from exporter.exposition.text import parse_label_pairs, unescape_label_value


# The families that give one figure: (family name, what to multiply its value by for the figure's unit),
# several where a vendor's exporter names it differently by model or with an optional prefix.
Families = Tuple[Tuple[str, float], ...]


class FigureNames(NamedTuple):
    """A vendor's upstream exporter's families for the figures the core reads, its dialect (the labels that
    name a device and its holder), and the labels naming its model and its node (empty where its exporter
    has none). Handed in as Vendor.figures."""

    utilization_percent: Families  # a whole device's utilisation, 0-100
    engine_active_ratio: Families  # utilisation where the percentage is not reported (a partition's), 0-1
    memory_used_mib: Families
    memory_free_mib: Families
    memory_reserved_mib: Families
    memory_total_mib: Families  # where the exporter reports the size itself, else used + free + reserved
    power_watts: Families
    dialect: SampleDialect  # how its samples name a device and its holder, and how our rows name a device
    model_label: str
    node_name_labels: Tuple[str, ...]  # the labels carrying the node's name, first non-empty wins

    @property
    def uuid_labels(self) -> Tuple[str, ...]:
        return self.dialect.uuid_labels

    @property
    def instance_label(self) -> str:
        return self.dialect.instance_label


# The figures of the node page, by DeviceFigures field: what a person looking at a node wants first.
_PAGE_FIELDS = ("utilization_percent", "engine_active_ratio", "memory_used_mib", "memory_free_mib",
                "memory_reserved_mib", "power_watts")


class DeviceFigures(NamedTuple):
    """One GPU or partition as the answer describes it; None where the answer has no such sample."""

    model: str = ""  # the model label ("NVIDIA L4")
    hostname: str = ""  # the node's name as the upstream sees it (FigureNames.node_name_labels)
    utilization_percent: Optional[float] = None
    engine_active_ratio: Optional[float] = None
    memory_used_mib: Optional[float] = None
    memory_free_mib: Optional[float] = None
    memory_reserved_mib: Optional[float] = None
    power_watts: Optional[float] = None

    @property
    def memory_total_mib(self) -> Optional[float]:
        parts = (self.memory_used_mib, self.memory_free_mib)
        return None if None in parts else sum(parts) + (self.memory_reserved_mib or 0.0)


def families_of(names: FigureNames, fields: Tuple[str, ...]) -> Dict[bytes, Tuple[str, float]]:
    """Family name → (the FigureNames field it gives, its scale), over these fields."""
    return {family.encode(): (field, scale) for field in fields for family, scale in getattr(names, field)}


def samples_of(families: Dict[bytes, Tuple[str, float]], value: bytes) -> re.Pattern:
    """A sample of these families: its name, the text between its braces, and a value matching `value`.
    A regular expression over the whole body skips every other line without splitting it: a read costs
    one pass in C."""
    alternatives = b"|".join(re.escape(name) for name in families) or rb"(?!)"  # no family: no sample
    return re.compile(rb"^(" + alternatives + rb")\{([^}\n]*)\}[ \t]+(" + value + rb")", re.MULTILINE)


@functools.lru_cache(maxsize=None)
def _page_lines(names: FigureNames) -> Tuple[re.Pattern, Dict[bytes, Tuple[str, float]]]:
    """The page's figures' samples of one vendor's exporter, and what each family gives; made once."""
    families = families_of(names, _PAGE_FIELDS)
    return samples_of(families, rb"\S+"), families


def read_device_figures(body: bytes, names: FigureNames) -> Dict[GpuIdentity, DeviceFigures]:
    """Each device the answer's samples of the figures name → its figures (the last sample wins)."""
    line, families = _page_lines(names)
    found: Dict[GpuIdentity, DeviceFigures] = {}
    for match in line.finditer(body):
        labels = _labels(match.group(2))
        value = _number(match.group(3))
        if labels is None:
            continue  # a line the exposition grammar refuses is dropped from the answer too
        identity = names.dialect.identity_of(labels)
        if not any(identity[:3]):
            continue
        known = found.get(identity, DeviceFigures())
        figures = known._replace(model=labels.get(names.model_label) or known.model,
                                 hostname=_first_label(labels, names.node_name_labels) or known.hostname)
        if value is not None:
            field, scale = families[match.group(1)]
            figures = figures._replace(**{field: value * scale if scale != 1.0 else value})
        found[identity] = figures
    return found


def _first_label(labels: Dict[str, str], names: Tuple[str, ...]) -> str:
    """The first non-empty of these labels (a vendor's exporter renamed one across versions), else ""."""
    return next((labels[name] for name in names if labels.get(name)), "")


def _labels(raw: bytes) -> Optional[Dict[str, str]]:
    pairs = parse_label_pairs(raw.decode("utf-8", "replace"))
    return None if pairs is None else {name: unescape_label_value(value) for name, value, _ in pairs}


def _number(raw: bytes) -> Optional[float]:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
