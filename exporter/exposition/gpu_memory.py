"""Pure: each GPU's memory size in MiB, read from one scrape by the vendor's names of its memory figures."""

from __future__ import annotations

import functools
import re
from typing import Dict, Iterable, Tuple

from exporter.exposition.device_figures import FigureNames, SampleLines, families_of, samples_of

# The memory figures, by what they stand for: the size where the exporter reports it, else free + used +
# reserved (without the reserved part the sum misses the driver's few hundred MiB).
_PARTS = ("memory_total_mib", "memory_free_mib", "memory_used_mib", "memory_reserved_mib")


@functools.lru_cache(maxsize=None)
def _memory_lines(names: FigureNames) -> Tuple[SampleLines, re.Pattern, re.Pattern, Dict[bytes, Tuple[str, float]]]:
    """The memory samples, the UUID label and the instance label of one vendor's exporter, made once."""
    parts = families_of(names, _PARTS)
    line = samples_of(parts, rb"[0-9.eE+-]+")
    uuid = re.compile(r'(?:^|,)\s*(?:' + "|".join(map(re.escape, names.uuid_labels)) + r')="([^"]*)"')
    instance = re.compile(r'(?:^|,)\s*' + re.escape(names.instance_label) + r'="([^"]+)"')
    return line, uuid, instance, parts


def framebuffer_mib(body: bytes, uuids: Iterable[str], names: FigureNames) -> Dict[str, float]:
    """UUID → the GPU's memory in MiB, for those of `uuids` whose whole-GPU samples carry it."""
    line, uuid_label, instance_label, part_of = _memory_lines(names)
    wanted = set(uuids)
    parts: Dict[str, Dict[str, float]] = {}
    for match in line.finditer(body):
        labels = match.group(2).decode("utf-8", "replace")
        uuid = uuid_label.search(labels)
        if uuid is None or uuid.group(1) not in wanted or instance_label.search(labels):
            continue  # a partition's own memory is not its GPU's
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        part, scale = part_of[match.group(1)]
        parts.setdefault(uuid.group(1), {})[part] = value * scale if scale != 1.0 else value
    totals = {}
    for uuid, fields in parts.items():
        total = fields.get("memory_total_mib") or (
            fields.get("memory_free_mib", 0.0) + fields.get("memory_used_mib", 0.0) + fields.get("memory_reserved_mib", 0.0)
            if "memory_free_mib" in fields and "memory_used_mib" in fields else 0.0)
        if total > 0:
            totals[uuid] = total
    return totals
