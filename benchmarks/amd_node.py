"""A synthetic AMD node for the benchmark: AMD device-metrics-exporter text, kubelet allocations, identity answers and sysfs.

How the node is built (so the figures can be judged):
- GPUs: eight MI300X, all in CPX mode (8 partitions each, 64 GPUs as the AMD exporter counts them), laid out as
  the demo's AMD node lays one out (exporter/vendors/amd/demo_sysfs.py: the buses, render minors and KFD topology
  of AMD's own MI300X CPX fixture); every partition is held by a pod of its own as `amd.com/cpx_nps1`, the first
  of each GPU by its PCI address, the rest `amdgpu_xcp_<N>`.
- Families and labels: the demo's AMD exporter text (exporter/vendors/amd/demo_exporter.py: AMD's documented
  names, help texts and labels in name order, device-wide figures on partition 0 only), and further per-partition
  families in AMD's style copied from its `gpu_used_vram` lines, up to about 6,400 series, as many as the NVIDIA
  body of the same size. Values move with the generation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.demo_exporter import SimulatedAmdExporter
from exporter.vendors.amd.demo_node import DemoGpu
from exporter.vendors.amd.demo_sysfs import GpuSpec, mi300x_node, write_sysfs
from exporter.vendors.amd.identity_client import HEALTHY, GpuState

RESOURCE = "amd.com/cpx_nps1"
_ECC_BLOCKS = ("umc", "sdma", "gfx", "mmhub", "athub", "pcie_bif", "hdp", "xgmi_wafl", "df", "smn", "sem", "mp0",
               "mp1", "fuse", "mca", "vcn", "jpeg", "ih", "mpio")
_USED_VRAM = re.compile(r"(?m)^gpu_used_vram(\{.*\}) \S+$")


def extra_family_names(count: int) -> List[str]:
    """Per-partition families beyond the demo's, in AMD's naming style: ECC counts per block, XGMI per link, then
    numbered fields, as a custom field list would add them."""
    names = [f"gpu_ecc_{kind}_{block}" for block in _ECC_BLOCKS for kind in ("correct", "uncorrect")]
    names += [f"xgmi_neighbor_{link}_{direction}_throughput" for link in range(8) for direction in ("request", "response")]
    names += [f"gpu_field_{number}" for number in range(count)]
    return names[:count]


class AmdNode:
    """Renders the node's AMD exporter text; `render(generation)` moves every value with the generation."""

    def __init__(self, series_wanted: int = 6400, gpus: int = 8):
        self.specs: List[GpuSpec] = mi300x_node(cpx_gpus=tuple(range(gpus)))[:gpus]
        self.gpus = _partitions(self.specs)
        base = self._base(0)
        per_family = len(self.gpus)
        self.extra = extra_family_names(max(0, (series_wanted - _series(base)) // per_family))

    @property
    def series(self) -> int:
        return _series(self.render(0).decode())

    def _base(self, generation: int) -> str:
        clock = iter((0.0, 30.0 * generation + 1.0))
        return SimulatedAmdExporter(self.gpus, clock=lambda: next(clock, 30.0 * generation + 1.0)).render().decode()

    def render(self, generation: int) -> bytes:
        base = self._base(generation)
        labels = _USED_VRAM.findall(base)
        parts = [base]
        for number, name in enumerate(self.extra):
            parts.append(f"# HELP {name} {name.replace('_', ' ')}\n# TYPE {name} gauge\n")
            parts += [f"{name}{text} {(generation * 7 + number + index) % 1000}\n" for index, text in enumerate(labels)]
        return "".join(parts).encode()

    def allocations(self) -> List[AllocatedDevice]:
        return [AllocatedDevice("bench", f"pod-{gpu.gpu_id}", "main", RESOURCE, gpu.device_id) for gpu in self.gpus]

    def identity_states(self) -> Tuple[GpuState, ...]:
        return tuple(GpuState(gpu.gpu_id, gpu.uuid, HEALTHY, gpu.pci_address, ()) for gpu in self.gpus)

    def write_sysfs(self, root: Path) -> None:
        write_sysfs(str(root), self.specs)


def _partitions(specs: List[GpuSpec]) -> List[DemoGpu]:
    gpus: List[DemoGpu] = []
    for spec in specs:
        xcps = spec.xcp_names()
        for partition in range(spec.partitions):
            device_id = spec.address if partition == 0 else xcps[partition - 1]
            gpus.append(DemoGpu(str(len(gpus)), str(partition), spec, spec.partition_address(partition), device_id,
                                f"{0x3dff74a1 + spec.index:08x}-0000-1000-80{spec.bus:02x}-0c4c1df1{partition:04x}",
                                f"6924090053{spec.index:02d}", 0.5))
    return gpus


def _series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))
