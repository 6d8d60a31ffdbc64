"""NVIDIA's own families: dcgm-exporter's status gauge and fetch failures, NVML's per-process shares, XIDs and timeouts."""

from __future__ import annotations

from typing import Tuple

from exporter.exposition.families import (DEVICE, DEVICE_ORDER, OWNER, Family, device_first, gathered, self_family,
                                          telemetry_family)

# What must be on for these to be served: the switches of the collectors that write them.
PROCESS_MODE = "--sharing.mode process"
XID_EVENTS = "--health.xid-events on"  # by default in --sharing.mode process

_SHARE = dict(optional_labels=("GPU_I_ID",), modes=frozenset({PROCESS_MODE}), needs_samples=True)

# /gpu/metrics, in the status block: dcgm-exporter's own name for whether the upstream answered (written
# first, beside the vendor-neutral pod_gpu_exporter_upstream_up), and the core's count of devices no sample
# names, in the words of NVIDIA's one form that needs its driver.
DCGM_UP = telemetry_family("pod_gpu_exporter_dcgm_up", "1 when dcgm-exporter's metrics were fetched for this scrape, "
                           "else 0 (and no GPU series).")
UNRESOLVED_DEVICES = telemetry_family("pod_gpu_exporter_unresolved_devices", "Allocated GPU devices whose samples "
                                      "cannot be identified (e.g. MIG-<uuid> without NVML).")

# /gpu/metrics in --sharing.mode process: each holder's share, the remainders by reason, after the status.
CONTAINER_MEMORY = telemetry_family(
    "pod_gpu_container_memory_used_bytes", "Framebuffer memory used on this GPU or MIG instance by the container's "
    "own processes (NVML per-process data).", labels=DEVICE + OWNER, **_SHARE, **device_first(*OWNER))
CONTAINER_SM = telemetry_family(
    "pod_gpu_container_sm_utilization_ratio", "SM utilisation (0-1) of this GPU by the container's own processes over "
    "the last sample window (NVML per-process data).", labels=DEVICE + OWNER, **_SHARE, **device_first(*OWNER))
UNATTRIBUTED_MEMORY = telemetry_family(
    "pod_gpu_unattributed_memory_used_bytes", "Framebuffer memory used on this GPU or MIG instance by processes of "
    "none of its holders: reason host (no pod, or unreadable) or not_holder (a pod that does not hold it).",
    labels=DEVICE + ("reason",), **_SHARE, **device_first("reason"))
UNATTRIBUTED_SM = telemetry_family(
    "pod_gpu_unattributed_sm_utilization_ratio", "SM utilisation (0-1) of this GPU by processes of none of its "
    "holders, by reason; with the holders' it adds up to at most 1.", labels=DEVICE + ("reason",), **_SHARE,
    **device_first("reason"))
UNATTRIBUTED_PROCESSES = telemetry_family(
    "pod_gpu_exporter_unattributed_processes", "Processes on this GPU or MIG instance that belong to none of its "
    "holders (host processes, other pods, unseen PIDs).", labels=DEVICE, **_SHARE, **device_first())
CONTAINER_ENERGY = telemetry_family(
    "pod_gpu_container_energy_joules_total", "Energy (J) of this GPU or MIG instance given to the container while it "
    "held it: NVML's board energy split by instance size and SM activity (--energy.idle-policy).",
    type="counter", labels=DEVICE + OWNER, **_SHARE, **device_first(*OWNER))
UNATTRIBUTED_ENERGY = telemetry_family(
    "pod_gpu_unattributed_energy_joules_total", "Energy (J) of this GPU or MIG instance given to no holder: reason "
    "no_holder (held by no pod) or idle (no holder active, --energy.idle-policy unattributed).",
    type="counter", labels=DEVICE + ("reason",), **_SHARE, **device_first("reason"))
CONTAINER_IDLE = telemetry_family(
    "pod_gpu_container_idle_seconds_total", "Seconds the container held this GPU or MIG instance with none of its "
    "processes on it.", type="counter", labels=DEVICE + OWNER, **_SHARE, **device_first(*OWNER))
# The not_holder remainder by container: GPU use outside an allocation, named (process mode only).
UNALLOCATED_MEMORY = telemetry_family(
    "pod_gpu_unallocated_memory_used_bytes", "Framebuffer memory used on this GPU or MIG instance by the container's "
    "processes although the container does not hold it: the named part of reason not_holder.",
    labels=DEVICE + OWNER, **_SHARE, **device_first(*OWNER))
UNALLOCATED_SM = telemetry_family(
    "pod_gpu_unallocated_sm_utilization_ratio", "SM utilisation (0-1) of this GPU by the container's processes "
    "although the container does not hold it: the named part of reason not_holder.", labels=DEVICE + OWNER,
    **_SHARE, **device_first(*OWNER))
NVML_UP = telemetry_family("pod_gpu_exporter_nvml_up", "1 when NVML answered the last per-process refresh "
                     "(--sharing.mode process), else 0.", modes=frozenset({PROCESS_MODE}))
# What a refresh costs on this node (NVML calls go to the driver): measured, since no benchmark can.
PROCESS_SHARES_REFRESH_DURATION = telemetry_family(
    "pod_gpu_exporter_process_shares_refresh_duration_seconds", "Time the last per-process refresh took: NVML, /proc "
    "and the shares (--sharing.mode process).", modes=frozenset({PROCESS_MODE}), needs_samples=True)
# XID events (--health.xid-events): counters only once an XID came, device_lost only while a GPU is lost.
_XID = dict(optional_labels=("GPU_I_ID",), modes=frozenset({XID_EVENTS}), needs_samples=True)
DEVICE_XID_ERRORS = telemetry_family(
    "pod_gpu_device_xid_errors_total", "XID errors NVML reported on this GPU (GPU_I_ID: on this MIG instance) "
    "since the exporter started, by XID.", type="counter", labels=DEVICE + ("xid",), **_XID, **device_first("xid"))
CONTAINER_XID_ERRORS = telemetry_family(
    "pod_gpu_container_xid_errors_total", "XID errors NVML reported on this GPU or MIG instance while the container "
    "held it (an XID naming no MIG instance counts on every holder of the GPU), by XID.", type="counter",
    labels=DEVICE + OWNER + ("xid",), **_XID, **device_first(*OWNER, "xid"))
DEVICE_LOST = telemetry_family("pod_gpu_device_lost", "1 while NVML answers that this GPU is lost (fallen off the bus or "
                         "otherwise unreachable) when it is registered for events.", optional_labels=DEVICE,
                         modes=frozenset({XID_EVENTS}), needs_samples=True)
XID_EVENTS_UP = telemetry_family("pod_gpu_exporter_xid_events_up", "1 while at least one GPU is registered for NVML's XID "
                           "events and the last wait answered, else 0 (--health.xid-events).",
                           modes=frozenset({XID_EVENTS}))

# /metrics: the upstream's failed fetches, and NVML calls cut at their bound.
DCGM_FETCH_FAILURES = self_family("pod_gpu_exporter_dcgm_fetch_failures_total", "counter", "Failed fetches of "
                            "dcgm-exporter's metrics.")
NVML_TIMEOUTS = self_family("pod_gpu_exporter_nvml_timeouts_total", "counter", "NVML calls (nvmlInit, MIG lookups, "
                      "per-process reads, XID event waits) that did not return within their bound, or were refused "
                      "while one still had not.")

FAMILIES: Tuple[Family, ...] = gathered(globals())
