"""AMD's exporter in the core's words: its sample dialect (device labels, its own holder labels, whole-GPU figures) and the families of the figures the core reads."""

from __future__ import annotations

from typing import Tuple

from exporter.core.identity import SampleDialect
from exporter.exposition.device_figures import FigureNames
from exporter.vendors.amd.dialect import (GPU_ID, GPU_UUID, NAME_PREFIX, NODE_NAME, PARTITION_ID, UPSTREAM_OWNER_LABELS,
                                          is_whole_gpu_figure)


# Every partition has its own gpu_id, which alone names it; gpu_partition_id is written beside it for joins.
# AMD's exporter has no device-node or instance label. A partitioned GPU's activity, power and energy, served
# on partition 0, are no holder's.
AMD_DIALECT = SampleDialect(
    uuid_labels=(GPU_UUID,), index_label=GPU_ID, device_label="", instance_label="", partition_label=PARTITION_ID,
    written=(("gpu", GPU_ID), ("partition", PARTITION_ID), ("uuid", GPU_UUID)), naming=("gpu", "UUID"),
    upstream_owner_labels=UPSTREAM_OWNER_LABELS, shared_figure=is_whole_gpu_figure)


def _both(name: str, scale: float = 1.0) -> Tuple[Tuple[str, float], ...]:
    """A family under its own name and behind the `amd_` prefix AMD's documentation configures."""
    return ((name, scale), (NAME_PREFIX + name, scale))


# gpu_gfx_activity is a percentage; VRAM is in MiB ("MB" in its help); power in W (gpu_package_power on MI3xx,
# gpu_power_usage on MI2xx and MI3xx).
AMD_FIGURES = FigureNames(
    utilization_percent=_both("gpu_gfx_activity"),
    engine_active_ratio=(),
    memory_used_mib=_both("gpu_used_vram"),
    memory_free_mib=_both("gpu_free_vram"),
    memory_reserved_mib=(),
    memory_total_mib=_both("gpu_total_vram"),
    power_watts=_both("gpu_package_power") + _both("gpu_power_usage"),
    dialect=AMD_DIALECT,
    model_label="card_series",
    node_name_labels=(NODE_NAME,),
)
