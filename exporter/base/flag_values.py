"""Pure: the values flags take, read and written back: durations, byte sizes, listen addresses."""

from __future__ import annotations

import re
from typing import Tuple

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_SIZE = re.compile(r"(\d+)(B|KiB|MiB|GiB|KB|MB|GB)?")
_SIZE_UNITS = {None: 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Go-style durations as Prometheus tools write them: 500ms, 5s, 1m, 1m30s, 2h."""
    text = text.strip()
    total, position = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"invalid duration {text!r} (examples: 500ms, 5s, 1m30s)")
    return total


def format_seconds(seconds: float) -> str:
    """A default duration as --help shows it: 5s, 2.5s, 1m."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


def parse_size(text: str) -> int:
    """Byte sizes as exporter-toolkit and Kubernetes users write them: 8MiB, 512KiB, 10MB, 1048576."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"invalid size {text!r} (examples: 8MiB, 512KiB, 10MB, 1048576)")
    size = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    if size <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return size


def format_size(size: int) -> str:
    """A default size as --help shows it: in the largest binary unit that divides it."""
    for unit in ("GiB", "MiB", "KiB"):
        if size % _SIZE_UNITS[unit] == 0:
            return f"{size // _SIZE_UNITS[unit]}{unit}"
    return str(size)


def parse_listen_address(text: str) -> Tuple[str, int]:
    """':9400', '0.0.0.0:9400', '[::1]:9400' → (host, port); an empty host means every interface."""
    host, separator, port_text = text.rpartition(":")
    if not separator or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"invalid listen address {text!r} (expected HOST:PORT, e.g. :9400 or 127.0.0.1:9400)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"invalid listen address {text!r} (write IPv6 hosts in brackets, e.g. [::]:9400)")
    return host, int(port_text)
