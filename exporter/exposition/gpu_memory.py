"""Pure: each GPU's framebuffer size in MiB, read from dcgm-exporter's framebuffer fields in one scrape."""

from __future__ import annotations

import re
from typing import Dict, Iterable

# DCGM_FI_DEV_FB_TOTAL where the counters file asks for it; else free + used + reserved (dcgm-exporter's
# default counters; FB_RESERVED since 3.3, without it the sum misses the driver's few hundred MiB).
_FB_LINE = re.compile(rb"^DCGM_FI_DEV_FB_(TOTAL|FREE|USED|RESERVED)\{([^}\n]*)\}[ \t]+([0-9.eE+-]+)", re.MULTILINE)
_UUID = re.compile(r'(?:^|,)\s*(?:UUID|uuid)="([^"]*)"')
_INSTANCE = re.compile(r'(?:^|,)\s*GPU_I_ID="([^"]+)"')


def framebuffer_mib(body: bytes, uuids: Iterable[str]) -> Dict[str, float]:
    """UUID → the GPU's framebuffer in MiB, for those of `uuids` whose whole-GPU samples carry it."""
    wanted = set(uuids)
    parts: Dict[str, Dict[str, float]] = {}
    for match in _FB_LINE.finditer(body):
        labels = match.group(2).decode("utf-8", "replace")
        uuid = _UUID.search(labels)
        if uuid is None or uuid.group(1) not in wanted or _INSTANCE.search(labels):
            continue  # a MIG instance's own framebuffer is not its GPU's
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        parts.setdefault(uuid.group(1), {})[match.group(1).decode()] = value
    totals = {}
    for uuid, fields in parts.items():
        total = fields.get("TOTAL") or (fields.get("FREE", 0.0) + fields.get("USED", 0.0) + fields.get("RESERVED", 0.0)
                                        if "FREE" in fields and "USED" in fields else 0.0)
        if total > 0:
            totals[uuid] = total
    return totals
