"""The demo's AMD device-metrics-exporter: its Prometheus text for the demo node, with values that move over time.

Built from its documented names, help texts and labels (ROCm/device-metrics-exporter: the GaugeOpts and
`populateLabelsFromGPU` of pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go, docs/configuration/metricslist.md), labels
in name order as its Go client writes them. On the CPX GPU the whole GPU's activity, power, energy, temperatures
and clocks are served on partition 0 only (power reads 0 on the other partitions), VRAM per partition.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from exporter.exposition.text import render_label_pairs
from exporter.vendors.amd.demo_node import (NODE_NAME, PARTITION_VRAM_MB, WHOLE_VRAM_MB, DemoGpu, amd_own_holder,
                                            demo_gpus, is_unhealthy)

CARD_LABELS = (("card_model", "102-G30211-0C"), ("card_series", "AMD Instinct MI300X OAM"), ("card_vendor", "AMD"))
DRIVER_VERSION = "6.12.12"
IDLE_WATTS, BUSY_WATTS = 140.0, 610.0
# AMD's headers as its exporter writes them (the Help of its GaugeOpts; every family a gauge): upstream text,
# kept as it is like the NVIDIA demo's recorded scrape, not families of this exporter.
HEADERS = """\
# HELP gpu_nodes_total Number of GPUs in the node
# TYPE gpu_nodes_total gauge
# HELP gpu_gfx_activity Graphics engine usage in Percentage (0-100)
# TYPE gpu_gfx_activity gauge
# HELP gpu_umc_activity Memory engine usage in Percentage (0-100)
# TYPE gpu_umc_activity gauge
# HELP gpu_used_vram Used VRAM memory of the GPU (in MB)
# TYPE gpu_used_vram gauge
# HELP gpu_total_vram Total VRAM memory of the GPU (in MB)
# TYPE gpu_total_vram gauge
# HELP gpu_free_vram Free VRAM memory of the GPU (in MB)
# TYPE gpu_free_vram gauge
# HELP gpu_package_power Current socket power in Watts
# TYPE gpu_package_power gauge
# HELP gpu_energy_consumed Accumulated energy consumed by the GPU in uJ
# TYPE gpu_energy_consumed gauge
# HELP gpu_junction_temperature Current junction/hotspot temperature in Celsius
# TYPE gpu_junction_temperature gauge
# HELP gpu_memory_temperature Current memory temperature in Celsius
# TYPE gpu_memory_temperature gauge
# HELP gpu_clock List of current GPU clock frequencies in MHz
# TYPE gpu_clock gauge
# HELP gpu_health Health of the GPU (0 = Unhealthy | 1 = Healthy)
# TYPE gpu_health gauge
"""
# What a partition other than the first serves of a family: its own value, nothing, or 0.
OWN, NONE, ZERO = "own", "none", "zero"
FAMILIES = (  # name, what a further partition serves; in HEADERS' order
    ("gpu_gfx_activity", NONE), ("gpu_umc_activity", NONE), ("gpu_used_vram", OWN), ("gpu_total_vram", OWN),
    ("gpu_free_vram", OWN), ("gpu_package_power", ZERO), ("gpu_energy_consumed", NONE),
    ("gpu_junction_temperature", NONE), ("gpu_memory_temperature", NONE), ("gpu_clock", NONE), ("gpu_health", OWN),
)


class SimulatedAmdExporter:
    """Renders the demo node's samples at the clock's moment; `prefix` is CommonConfig.MetricsFieldPrefix."""

    def __init__(self, gpus: Optional[Sequence[DemoGpu]] = None, prefix: str = "", hostname: str = NODE_NAME,
                 clock: Callable[[], float] = time.monotonic):
        self._gpus = list(gpus) if gpus is not None else demo_gpus()
        self._prefix = prefix
        self._hostname = hostname
        self._clock = clock
        self._started = clock()

    @property
    def elapsed_seconds(self) -> float:
        return self._clock() - self._started

    def render(self) -> bytes:
        elapsed = self.elapsed_seconds
        values = {gpu.gpu_id: _figures(gpu, self._gpus, elapsed) for gpu in self._gpus}
        parts = [self._header("gpu_nodes_total"), f"{self._prefix}gpu_nodes_total"
                 f"{{{render_label_pairs([('hostname', self._hostname)])}}} {len(self._gpus)}\n"]
        for name, further_partitions in FAMILIES:
            parts.append(self._header(name))
            for gpu in self._gpus:
                further = gpu.partitioned and gpu.partition_id != "0"
                if further and further_partitions == NONE:
                    continue
                for extra, value in _samples(name, values[gpu.gpu_id], further and further_partitions == ZERO):
                    parts.append(f"{self._prefix}{name}{{{self._labels(gpu, extra)}}} {_number(value)}\n")
        return "".join(parts).encode()

    def _header(self, name: str) -> str:
        """The family's two header lines from HEADERS, its name behind the prefix."""
        return "".join(line.replace(f" {name} ", f" {self._prefix}{name} ", 1) + "\n"
                       for line in HEADERS.splitlines() if line.split(" ")[2] == name)

    def _labels(self, gpu: DemoGpu, extra: Tuple[Tuple[str, str], ...]) -> str:
        namespace, pod, container = amd_own_holder(gpu.gpu_id) or ("", "", "")
        pairs = [*CARD_LABELS, ("container", container), ("deployment_mode", "baremetal"),
                 ("driver_version", DRIVER_VERSION), ("gpu_compute_partition_type", gpu.spec.compute),
                 ("gpu_id", gpu.gpu_id), ("gpu_memory_partition_type", gpu.spec.memory),
                 ("gpu_partition_id", gpu.partition_id), ("gpu_uuid", gpu.uuid), ("hostname", self._hostname),
                 ("job_id", ""), ("job_partition", ""), ("job_user", ""), ("namespace", namespace), ("pod", pod),
                 ("pod_uuid", ""), ("serial_number", gpu.serial_number), *extra]
        return render_label_pairs(sorted(pairs))


def _figures(gpu: DemoGpu, gpus: Sequence[DemoGpu], elapsed: float) -> Dict[str, float]:
    """The GPU's figures at `elapsed`; a partitioned GPU's device-wide ones from all its partitions' loads."""
    siblings = [g for g in gpus if g.spec.index == gpu.spec.index]
    busy = sum(_busy(g, elapsed) for g in siblings) / len(siblings)
    total = PARTITION_VRAM_MB if gpu.partitioned else WHOLE_VRAM_MB
    used = round(300 + gpu.load * (total - 2000) * (0.85 + 0.1 * math.sin(elapsed / 40 + int(gpu.gpu_id))))
    watts = IDLE_WATTS + (BUSY_WATTS - IDLE_WATTS) * busy
    # Energy grows by the mean power of the loads since the start (a sum that never goes back).
    mean_watts = IDLE_WATTS + (BUSY_WATTS - IDLE_WATTS) * sum(g.load for g in siblings) / len(siblings)
    return {"gpu_gfx_activity": round(100 * busy), "gpu_umc_activity": round(60 * busy),
            "gpu_used_vram": used, "gpu_total_vram": total, "gpu_free_vram": total - used,
            "gpu_package_power": round(watts), "gpu_energy_consumed": round(4.2e12 + 1e6 * mean_watts * elapsed),
            "gpu_junction_temperature": round(38 + 45 * busy), "gpu_memory_temperature": round(34 + 30 * busy),
            "gpu_clock": round(500 + 1600 * busy),
            "gpu_health": 0 if is_unhealthy(gpu.gpu_id, elapsed) else 1}


def _busy(gpu: DemoGpu, elapsed: float) -> float:
    if gpu.load == 0:
        return 0.0
    return min(1.0, max(0.0, gpu.load + 0.08 * math.sin(elapsed / 7 + int(gpu.gpu_id))))


def _samples(name: str, figures: Dict[str, float], zero: bool) -> List[Tuple[Tuple[Tuple[str, str], ...], float]]:
    if name == "gpu_clock":
        return [((("clock_type", "gfx"),), figures[name]), ((("clock_type", "memory"),), 1300)]
    return [((), 0 if zero else figures[name])]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
