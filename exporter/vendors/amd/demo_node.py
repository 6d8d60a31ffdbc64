"""The demo's AMD node: eight MI300X GPUs, the last in CPX mode, under `mixed` resource names, and who holds what.

Whole GPUs are `amd.com/spx_nps1` devices named by PCI address; the CPX GPU's eight partitions are
`amd.com/cpx_nps1` devices, the first named by its GPU's address and the rest `amdgpu_xcp_<N>`, held by different
pods. One GPU turns unhealthy a while after the start. A pod also holds one of AMD's NICs, which is no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.demo_sysfs import GpuSpec, mi300x_node
from exporter.vendors.amd.identity_client import HEALTHY, UNHEALTHY, GpuState

NODE_NAME = "demo-node"
CPX_GPU = 7  # its index on the node
SPX_RESOURCE = "amd.com/spx_nps1"
CPX_RESOURCE = "amd.com/cpx_nps1"
NIC_RESOURCE = "amd.com/nic"
NIC_ADDRESS = "0000:0c:00.0"  # an AMD Pollara NIC: a PCI address too, under a resource that is not a GPU
UNHEALTHY_GPU_ID = "5"
UNHEALTHY_AFTER_SECONDS = 90.0
WHOLE_VRAM_MB = 196592
PARTITION_VRAM_MB = 24574


@dataclass(frozen=True)
class DemoGpu:
    """One GPU as amdsmi counts it: a whole GPU, or one partition of the CPX GPU."""

    gpu_id: str
    partition_id: str
    spec: GpuSpec  # its physical GPU
    pci_address: str
    device_id: str  # the device plugin's ID for it
    uuid: str
    serial_number: str
    load: float  # how busy its holder keeps it, 0-1 (0: idle)

    @property
    def partitioned(self) -> bool:
        return self.spec.compute != "spx"


# (namespace, pod, container) per gpu_id; absent: idle. Named apart from the NVIDIA demo's pods, so that both
# demos behind one Prometheus are one cluster's pods, as on a mixed fleet.
HOLDERS = {
    "0": ("ml-team", "trainer-amd-0", "pytorch"), "1": ("ml-team", "trainer-amd-0", "pytorch"),
    "2": ("inference", "llm-amd-a", "vllm"), "4": ("research", "notebook-7f9c", "jupyter"),
    "5": ("inference", "llm-amd-b", "vllm"),
    "7": ("batch", "embed-0", "worker"), "8": ("batch", "embed-1", "worker"), "9": ("batch", "embed-2", "worker"),
    "10": ("inference", "small-model-a", "vllm"), "12": ("research", "notebook-31aa", "jupyter"),
}
LOADS = {"0": 0.92, "1": 0.88, "2": 0.55, "4": 0.18, "5": 0.7, "7": 0.8, "8": 0.6, "9": 0.75, "10": 0.4,
         "12": 0.1}


def demo_gpus() -> List[DemoGpu]:
    """The GPUs amdsmi lists on the demo node, in its order: by PCI address, partitions in order."""
    gpus: List[DemoGpu] = []
    for spec in mi300x_node(cpx_gpus=(CPX_GPU,)):
        xcps = spec.xcp_names()
        for partition in range(spec.partitions):
            gpu_id = str(len(gpus))
            device_id = spec.address if partition == 0 else xcps[partition - 1]
            gpus.append(DemoGpu(gpu_id, str(partition), spec, spec.partition_address(partition), device_id,
                                f"{0x3dff74a1 + spec.index:08x}-0000-1000-80{spec.bus:02x}-0c4c1df1{partition:04x}",
                                f"6924090053{spec.index:02d}", LOADS.get(gpu_id, 0.0)))
    return gpus


def demo_sysfs_specs() -> List[GpuSpec]:
    return mi300x_node(cpx_gpus=(CPX_GPU,))


def is_unhealthy(gpu_id: str, elapsed_seconds: float) -> bool:
    return gpu_id == UNHEALTHY_GPU_ID and elapsed_seconds >= UNHEALTHY_AFTER_SECONDS


def identity_states(elapsed_seconds: float) -> Tuple[GpuState, ...]:
    """What the demo's identity service lists at a moment; AssociatedWorkload as AMD's exporter writes it."""
    return tuple(GpuState(gpu.gpu_id, gpu.uuid, UNHEALTHY if is_unhealthy(gpu.gpu_id, elapsed_seconds) else HEALTHY,
                          gpu.pci_address, _workload(gpu.gpu_id)) for gpu in demo_gpus())


def _workload(gpu_id: str) -> Tuple[str, ...]:
    holder = HOLDERS.get(gpu_id)
    return (f"pod: {holder[1]}, namespace: {holder[0]}, container: {holder[2]}",) if holder else ()


def allocations() -> List[AllocatedDevice]:
    """What the demo's kubelet lists: the held GPUs under their resource, and the NIC."""
    held = [AllocatedDevice(*HOLDERS[gpu.gpu_id], CPX_RESOURCE if gpu.partitioned else SPX_RESOURCE, gpu.device_id)
            for gpu in demo_gpus() if gpu.gpu_id in HOLDERS]
    return held + [AllocatedDevice("networking", "rdma-bench", "bench", NIC_RESOURCE, NIC_ADDRESS)]


def offered() -> List[Tuple[str, str]]:
    """(resource, device ID) of every device the device plugins offer, held or idle."""
    return [(CPX_RESOURCE if gpu.partitioned else SPX_RESOURCE, gpu.device_id) for gpu in demo_gpus()] + [
        (NIC_RESOURCE, NIC_ADDRESS)]


def amd_own_holder(gpu_id: str) -> Optional[Tuple[str, str, str]]:
    """The holder AMD's exporter writes on a GPU's samples: ours, but for one it has not caught up with (it keeps
    a pod that has finished on GPU 2), which ours must replace."""
    if gpu_id == "2":
        return ("inference", "llm-server-old-5d8f", "vllm")
    return HOLDERS.get(gpu_id)
