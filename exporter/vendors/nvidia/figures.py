"""dcgm-exporter's names for the figures the core reads (utilisation, memory, power) and for the labels that name a GPU."""

from __future__ import annotations

from exporter.exposition.device_figures import FigureNames
from exporter.exposition.labels import DEFAULT_DIALECT

# dcgm-exporter's labels for a device (UUID or uuid, gpu, device, GPU_I_ID) and its own attribution (-k and
# the rest): the dialect the core falls back on where no vendor is named, as every series was named before.
DCGM_DIALECT = DEFAULT_DIALECT

# dcgm-exporter's default counters carry all but GR_ENGINE_ACTIVE, which stands for utilisation on MIG
# instances (GPU_UTIL is per GPU only), and FB_TOTAL, read where a counters file asks for it (FB_RESERVED
# since 3.3). Its UUID label is `UUID` (`uuid` in some configurations); the node's name is `Hostname`
# until mid 4.x, `hostname` since.
DCGM_FIGURES = FigureNames(
    utilization_percent=(("DCGM_FI_DEV_GPU_UTIL", 1.0),),
    engine_active_ratio=(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),),
    memory_used_mib=(("DCGM_FI_DEV_FB_USED", 1.0),),
    memory_free_mib=(("DCGM_FI_DEV_FB_FREE", 1.0),),
    memory_reserved_mib=(("DCGM_FI_DEV_FB_RESERVED", 1.0),),
    memory_total_mib=(("DCGM_FI_DEV_FB_TOTAL", 1.0),),
    power_watts=(("DCGM_FI_DEV_POWER_USAGE", 1.0),),
    dialect=DCGM_DIALECT,
    model_label="modelName",
    node_name_labels=("Hostname", "hostname"),
)
