"""A node's AMD sysfs files, written into a folder: what ROCm's device plugin and DRA driver read, and no more.

The demo serves with its sysfs root pointed at such a folder; tests build theirs with it. The shape follows a real
MI300X node as AMD's own fixtures record it (ROCm/k8s-device-plugin testdata/topo-mi300-cpx): per GPU one render
node on its PCI device and seven amdgpu_xcp platform devices, the render minors of GPU g at 128 + 8g onwards, and
one KFD topology node per partition in use, whose location_id carries the partition in its PCI function bits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Sequence

XCP_PER_GPU = 7  # the kernel makes a platform device for every partition after the first (MI300: up to 8)
MI300X_DEVICE_ID = 0x74A1
AMD_VENDOR_ID = 0x1002
# The eight MI300X buses of AMD's CPX fixture, in its order.
MI300X_BUSES = (0x05, 0x27, 0x47, 0x65, 0x85, 0xA7, 0xC7, 0xE5)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU to write: its address, DRM minors, mode, and which amdgpu_xcp folders are its."""

    bus: int
    index: int                  # its place on the node: render minor 128 + 8 * index, card 8 * index
    compute: str = "spx"
    memory: str = "nps1"
    partitions: int = 1         # partitions in use (1: a whole GPU)
    domain: int = 0
    xcp_separator: str = "_"    # "." as some kernels name the folders
    in_kfd: bool = True         # False: KFD lists none of its render nodes

    @property
    def address(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:00.0"

    @property
    def render(self) -> int:
        return 128 + 8 * self.index

    @property
    def card(self) -> int:
        return 8 * self.index

    def partition_address(self, partition: int) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:00.{partition}"

    def xcp_names(self) -> List[str]:
        """Its amdgpu_xcp folders, the one of partition p (p >= 1) at p - 1."""
        first = XCP_PER_GPU * self.index
        return [f"amdgpu_xcp{self.xcp_separator}{first + k}" for k in range(XCP_PER_GPU)]


def mi300x_node(cpx_gpus: Sequence[int] = (), cpx_memory: str = "nps1") -> List[GpuSpec]:
    """Eight MI300X GPUs, whole (spx) but for the indices in `cpx_gpus`, which are in CPX mode (8 partitions)."""
    return [GpuSpec(bus, index, "cpx", cpx_memory, 8) if index in cpx_gpus else GpuSpec(bus, index)
            for index, bus in enumerate(MI300X_BUSES)]


def write_sysfs(root: str, gpus: Iterable[GpuSpec], cpu_nodes: int = 2) -> None:
    """Write the GPUs' sysfs files under `root` (a folder standing for /sys)."""
    base = Path(root)
    nodes = base / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for k in range(cpu_nodes):
        _write(nodes / str(k) / "properties", _properties(0, 0, 0, 0, cpu=True))
    next_node = cpu_nodes
    for gpu in gpus:
        _write_gpu(base, gpu)
        for partition in range(gpu.partitions if gpu.in_kfd else 0):
            location = gpu.bus << 8 | partition  # device 0, function = partition
            _write(nodes / str(next_node) / "properties",
                   _properties(gpu.render + partition, location, gpu.domain, 0x5A0 + gpu.bus))
            next_node += 1


def _write_gpu(base: Path, gpu: GpuSpec) -> None:
    # The driver's folder holds a link to the PCI device, as on a node.
    device = base / "devices" / f"pci{gpu.domain:04x}:00" / gpu.address
    _write(device / "current_compute_partition", gpu.compute.upper() + "\n")
    _write(device / "current_memory_partition", gpu.memory.upper() + "\n")
    _write(device / "numa_node", "0\n" if gpu.index < 4 else "1\n")
    (device / "drm" / f"card{gpu.card}").mkdir(parents=True, exist_ok=True)
    (device / "drm" / f"renderD{gpu.render}").mkdir(parents=True, exist_ok=True)
    driver = base / "module" / "amdgpu" / "drivers" / "pci:amdgpu"
    driver.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(device, driver), driver / gpu.address)
    for offset, name in enumerate(gpu.xcp_names(), start=1):
        drm = base / "devices" / "platform" / name / "drm"
        (drm / f"card{gpu.card + offset}").mkdir(parents=True, exist_ok=True)
        (drm / f"renderD{gpu.render + offset}").mkdir(parents=True, exist_ok=True)


def _properties(render_minor: int, location_id: int, domain: int, unique: int, cpu: bool = False) -> str:
    """A KFD node's properties, with the lines ROCm's code reads among others a node has."""
    lines = [("cpu_cores_count", 64 if cpu else 0), ("simd_count", 0 if cpu else 152),
             ("simd_per_cu", 0 if cpu else 4), ("vendor_id", 0 if cpu else AMD_VENDOR_ID),
             ("device_id", 0 if cpu else MI300X_DEVICE_ID), ("location_id", location_id), ("domain", domain),
             ("drm_render_minor", render_minor), ("unique_id", 0 if cpu else 16404946649897475633 + unique),
             ("num_xcc", 0 if cpu else 1)]
    return "".join(f"{name} {value}\n" for name, value in lines)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="ascii")
