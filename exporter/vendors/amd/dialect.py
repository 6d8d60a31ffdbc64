"""The AMD metrics exporter's label dialect: which labels name the GPU, the node and its own idea of the owner,
and which families carry the figures the core reads (utilisation, memory, power, energy, health).

From ROCm/device-metrics-exporter: label names are the lower-cased MetricLabel / GPUMetricLabel enums
(pkg/exporter/proto/exporterconfig.proto), filled in `populateLabelsFromGPU` (pkg/amdgpu/gpuagent/
gpuagent_gpu_metrics.go); family names are its GaugeOpts names there, each behind the optional
CommonConfig.MetricsFieldPrefix (`WrapRegistererWithPrefix` in pkg/exporter/metricsutil/metrics.go).
Pure: names and label values in, answers out.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional

from exporter.exposition.device_figures import partitioned_by_mode

GPU_ID = "gpu_id"                  # amdsmi's index; every partition has its own
PARTITION_ID = "gpu_partition_id"  # the partition within its GPU; "NA" where the GPU cannot be partitioned
GPU_UUID = "gpu_uuid"              # optional (its export can be turned off)
COMPUTE_PARTITION_TYPE = "gpu_compute_partition_type"  # spx, dpx, tpx, qpx, cpx (lower case)
NODE_NAME = "hostname"
IDENTITY_LABELS = (GPU_ID, PARTITION_ID, GPU_UUID)
# What it writes of its own pod attribution (one workload per GPU) or Slurm job: ours replaces it, so these are
# removed from every sample, attributed or not, as dcgm-exporter's -k labels are.
UPSTREAM_OWNER_LABELS = frozenset({"pod", "namespace", "container", "pod_uuid", "job_id", "job_user",
                                   "job_partition"})
NAME_PREFIX = "amd_"  # the prefix AMD's documentation configures; names are recognised with or without it

UTILIZATION = "utilization"    # ratio 0-1
MEMORY_USED = "memory_used"    # bytes
MEMORY_TOTAL = "memory_total"  # bytes
POWER = "power"                # watts
ENERGY = "energy"              # joules, growing
HEALTH = "health"              # 1 healthy, 0 not


class Figure(NamedTuple):
    """One figure the core reads, as a family of the AMD exporter gives it."""

    figure: str   # one of the names above
    scale: float  # multiply the sample's value by it to get the figure's unit
    device_wide: bool  # on a partitioned GPU, served on partition 0 for the whole GPU


_MIB = 1024.0 * 1024.0  # "MB" in AMD's help texts: KFD's used_memory bytes / (1024 * 1024)
# Families by their unprefixed names. gpu_package_power (MI3xx) and gpu_power_usage (MI2xx and MI3xx) are both
# the board's watts; gpu_energy_consumed is µJ, exposed as a gauge that only grows.
FIGURES = {
    "gpu_gfx_activity": Figure(UTILIZATION, 0.01, True),
    "gpu_used_vram": Figure(MEMORY_USED, _MIB, False),
    "gpu_total_vram": Figure(MEMORY_TOTAL, _MIB, False),
    "gpu_package_power": Figure(POWER, 1.0, True),
    "gpu_power_usage": Figure(POWER, 1.0, True),
    "gpu_energy_consumed": Figure(ENERGY, 1e-6, True),
    "gpu_health": Figure(HEALTH, 1.0, False),
}
# Families served for the whole GPU on its first partition and 0 or nothing on the others
# (docs/configuration/metricslist.md: "applicable for primary partition (partition_id=0)").
DEVICE_WIDE_FAMILIES = frozenset({"gpu_gfx_activity", "gpu_umc_activity", "gpu_package_power", "gpu_power_usage",
                                  "gpu_energy_consumed"})
# "none": a GPU that cannot be partitioned (MI2xx; GPU_COMPUTE_PARTITION_TYPE_NONE lower-cased).
WHOLE_GPU_MODES = ("", "spx", "none")


class SampleIdentity(NamedTuple):
    """The GPU a sample is about, as its labels say."""

    gpu_id: str
    partition_id: str
    gpu_uuid: str


def unprefixed(name: str) -> str:
    """A family's name without the `amd_` prefix, if it has it."""
    return name[len(NAME_PREFIX):] if name.startswith(NAME_PREFIX) else name


def figure_of(name: str) -> Optional[Figure]:
    """The figure a family carries (`gpu_gfx_activity` and `amd_gpu_gfx_activity` alike), or None."""
    return FIGURES.get(unprefixed(name))


def identity_of(labels: Mapping[str, str]) -> Optional[SampleIdentity]:
    """The GPU a sample names; None for a sample about no GPU (the node's totals)."""
    gpu_id = labels.get(GPU_ID, "")
    if not gpu_id:
        return None
    return SampleIdentity(gpu_id, labels.get(PARTITION_ID, ""), labels.get(GPU_UUID, ""))


def node_name(labels: Mapping[str, str]) -> str:
    return labels.get(NODE_NAME, "")


def is_partitioned(labels: Mapping[str, str]) -> bool:
    """Whether the sample's GPU is one partition of a GPU split in several (the rule the core's figures apply)."""
    return partitioned_by_mode(labels, COMPUTE_PARTITION_TYPE, WHOLE_GPU_MODES)


def is_whole_gpu_figure(name: str, labels: Mapping[str, str]) -> bool:
    """Whether a sample is a whole partitioned GPU's figure served on one of its partitions: activity, power and
    energy of a partitioned GPU belong to none of its partitions' holders alone."""
    return unprefixed(name) in DEVICE_WIDE_FAMILIES and is_partitioned(labels)
