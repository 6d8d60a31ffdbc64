"""The families `top` reads, by their catalogue names, and how each is read: as it is, or as a rate."""

from __future__ import annotations

from exporter.collectors.kubernetes import families as kubernetes
from exporter.exposition import families as catalogue
from exporter.vendors.nvidia import families as nvidia

# Held GPUs and their holders.
ALLOCATED = catalogue.ALLOCATED_GPUS.name
ALLOCATION = catalogue.ALLOCATION_INFO.name
HEALTH = kubernetes.DEVICE_HEALTH.name
LOST = nvidia.DEVICE_LOST.name
# --sharing.mode process: each holder's own share.
SM = nvidia.CONTAINER_SM.name
MEMORY = nvidia.CONTAINER_MEMORY.name
ENERGY = nvidia.CONTAINER_ENERGY.name  # a counter: read as its rate, watts
IDLE = nvidia.CONTAINER_IDLE.name  # a counter: read as its rate, the share of time idle
# What nobody holds, and use outside any allocation.
UNATTRIBUTED_SM = nvidia.UNATTRIBUTED_SM.name
UNATTRIBUTED_MEMORY = nvidia.UNATTRIBUTED_MEMORY.name
UNATTRIBUTED_ENERGY = nvidia.UNATTRIBUTED_ENERGY.name
UNALLOCATED_SM = nvidia.UNALLOCATED_SM.name
UNALLOCATED_MEMORY = nvidia.UNALLOCATED_MEMORY.name
# --sharing.mode device: the device's own readings, as dcgm-exporter names them (the exporter passes
# them through). GR_ENGINE_ACTIVE is a 0-1 ratio where profiling metrics are on; GPU_UTIL a percentage.
DEVICE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DEVICE_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DEVICE_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
# AMD nodes: AMD's device-metrics-exporter samples, re-served (docs/mixed-fleet.md), named by gpu_id and
# gpu_partition_id, read with or without AMD's optional `amd_` name prefix. A partitioned GPU serves
# activity and power for the whole GPU on its first partition: no partition holder's own.
AMD_ACTIVITY = ("gpu_gfx_activity", "amd_gpu_gfx_activity")  # %
AMD_VRAM_USED = ("gpu_used_vram", "amd_gpu_used_vram")  # MiB, each partition its own
AMD_POWER = ("gpu_package_power", "amd_gpu_package_power", "gpu_power_usage", "amd_gpu_power_usage")  # W
# Which GPU vendor a node's exporter serves: its status block's info gauge (label `vendor`).
VENDOR_INFO = catalogue.VENDOR_INFO.name

GAUGES = (ALLOCATED, ALLOCATION, HEALTH, LOST, SM, MEMORY, UNATTRIBUTED_SM, UNATTRIBUTED_MEMORY,
          UNALLOCATED_SM, UNALLOCATED_MEMORY, DEVICE_ACTIVE, DEVICE_UTIL, DEVICE_FB_USED, VENDOR_INFO,
          *AMD_ACTIVITY, *AMD_VRAM_USED, *AMD_POWER)
COUNTERS = (ENERGY, IDLE, UNATTRIBUTED_ENERGY)
# Whether the exporter is there at all: every scrape of its telemetry path carries one of them (dcgm_up
# on NVIDIA nodes, upstream_up on every vendor's; an exporter older than upstream_up serves dcgm_up).
PRESENCE = (nvidia.DCGM_UP.name, catalogue.UPSTREAM_UP.name)
