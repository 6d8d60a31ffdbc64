"""Memory of a running process as the kernel reports it in /proc/PID/status (VmHWM: peak, VmRSS: now)."""

from __future__ import annotations


def proc_status_mib(pid: int, field: str) -> float:
    """A kB field of /proc/PID/status ("VmHWM", "VmRSS") in MiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)
