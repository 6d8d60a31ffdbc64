"""Pure: each device's model and a few device-level figures, read from one dcgm-exporter answer."""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional

from exporter.core.identity import GpuIdentity
from exporter.exposition.text import parse_label_pairs, unescape_label_value

# The fields a person looking at a node wants first; dcgm-exporter's default counters carry all but
# GR_ENGINE_ACTIVE, which stands for utilisation on MIG instances (GPU_UTIL is per GPU only).
_FIELDS = {
    b"DCGM_FI_DEV_GPU_UTIL": "utilization_percent",
    b"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "engine_active_ratio",
    b"DCGM_FI_DEV_FB_USED": "memory_used_mib",
    b"DCGM_FI_DEV_FB_FREE": "memory_free_mib",
    b"DCGM_FI_DEV_FB_RESERVED": "memory_reserved_mib",
    b"DCGM_FI_DEV_POWER_USAGE": "power_watts",
}
# One sample of those fields: its name, the text between its braces, its value. A regular expression over
# the whole body skips every other line without splitting it: a page view costs one pass in C.
# The labels that carry the node's name: dcgm-exporter's `Hostname` until mid 4.x, `hostname` since.
NODE_NAME_LABELS = ("Hostname", "hostname")
_LINE = re.compile(rb"^(" + b"|".join(_FIELDS) + rb")\{([^}\n]*)\}[ \t]+(\S+)", re.MULTILINE)


class DeviceFigures(NamedTuple):
    """One GPU or MIG instance as the answer describes it; None where the answer has no such sample."""

    model: str = ""  # the modelName label ("NVIDIA L4")
    hostname: str = ""  # the node's name as the upstream sees it (NODE_NAME_LABELS)
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


def read_device_figures(body: bytes) -> Dict[GpuIdentity, DeviceFigures]:
    """Each device the answer's samples of the fields name → its figures (the last sample wins)."""
    found: Dict[GpuIdentity, DeviceFigures] = {}
    for match in _LINE.finditer(body):
        labels = _labels(match.group(2))
        value = _number(match.group(3))
        if labels is None:
            continue  # a line the exposition grammar refuses is dropped from the answer too
        identity = GpuIdentity(labels.get("UUID") or labels.get("uuid", ""), labels.get("gpu", ""),
                               labels.get("device", ""), labels.get("GPU_I_ID", ""))
        if not any(identity[:3]):
            continue
        known = found.get(identity, DeviceFigures())
        figures = known._replace(model=labels.get("modelName") or known.model,
                                 hostname=_node_name(labels) or known.hostname)
        found[identity] = figures if value is None else figures._replace(**{_FIELDS[match.group(1)]: value})
    return found


def _node_name(labels: Dict[str, str]) -> str:
    """The node's name as the upstream labels it: `Hostname` up to mid 4.x, `hostname` since (and on AMD's)."""
    return next((labels[name] for name in NODE_NAME_LABELS if labels.get(name)), "")


def _labels(raw: bytes) -> Optional[Dict[str, str]]:
    pairs = parse_label_pairs(raw.decode("utf-8", "replace"))
    return None if pairs is None else {name: unescape_label_value(value) for name, value, _ in pairs}


def _number(raw: bytes) -> Optional[float]:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None  # NaN and Inf say nothing here
