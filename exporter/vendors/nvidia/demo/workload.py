"""What runs on the NVIDIA demo's simulated node: its GPUs' load, who holds them, the pods and their GPU processes."""

from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Tuple

from exporter.demo.cluster import KAI_QUEUE, LOCAL_QUEUE, SimulatedPod
from exporter.sources.kubelet import AllocatedDevice

GPU_COUNT = 4
NODE_NAME = "demo-node"
# How busy each simulated GPU is, on average (0..1); GPU 3 is idle.
LOAD = {0: 0.85, 1: 0.8, 2: 0.45, 3: 0.0}
FB_MIB = 18000  # framebuffer used at full load, as the dcgm template's FB_USED counts it (MiB)


def gpu_uuid(index: int) -> str:
    return f"GPU-5e1f0c3a-{index:04d}-4d2b-9a61-0demo0000{index:03d}"


def gpu_load(gpu: int, elapsed: float) -> float:
    """The GPU's load now: each one swings around its own average on a two-minute cycle, shifted so
    that the curves differ."""
    return LOAD[gpu] * (0.8 + 0.2 * math.sin(elapsed / 20.0 + gpu)) if LOAD[gpu] else 0.0


def gpu_energy_mj(gpu: int, elapsed: float) -> int:
    """The board's energy counter in mJ: it only grows, at the simulated power draw (both dcgm-exporter's
    DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION and NVML's nvmlDeviceGetTotalEnergyConsumption read it)."""
    return int(4742776 + elapsed * (16365 + 55000 * LOAD[gpu]))


def simulated_allocations() -> List[AllocatedDevice]:
    """Who holds what on the simulated node; GPU 3 is idle."""
    return [
        # A training job holding two whole GPUs.
        AllocatedDevice("ml-team", "trainer-0", "pytorch", "nvidia.com/gpu", gpu_uuid(0)),
        AllocatedDevice("ml-team", "trainer-0", "pytorch", "nvidia.com/gpu", gpu_uuid(1)),
        # GPU 2 time-sliced between two inference pods; one of them holds two replicas.
        AllocatedDevice("inference", "llm-server-a", "vllm", "nvidia.com/gpu.shared", gpu_uuid(2) + "::0"),
        AllocatedDevice("inference", "llm-server-a", "vllm", "nvidia.com/gpu.shared", gpu_uuid(2) + "::3"),
        AllocatedDevice("inference", "llm-server-b", "vllm", "nvidia.com/gpu.shared", gpu_uuid(2) + "::1"),
    ]


# GPU 3 is given out by NVIDIA's DRA driver, not by a device plugin (a GPU is offered by one or the
# other): its ResourceSlice publishes it, no claim holds it, and the driver taints it because it
# cannot monitor the device's health.
DRA_GPU = 3
DRA_DRIVER = "gpu.nvidia.com"
DRA_TAINT = {"key": "gpu.nvidia.com/unmonitored", "effect": "None"}


# GPU 3, which no pod holds, is given to a Slurm job outside Kubernetes: the job's prolog wrote its ID
# into GPU 3's file of the node's job-mapping folder (dcgm-exporter's --hpc-job-mapping-dir convention:
# a file named by the GPU's index, one job ID per line). GPU index → the job IDs in its file.
HPC_JOBS = {DRA_GPU: ("7311",)}


def simulated_offered() -> List[Tuple[str, str]]:
    """What the device plugins offer, held or free (GetAllocatableResources): GPU 2 as 4 time-slicing
    replicas, GPUs 0 and 1 whole (GPU 3 is DRA's)."""
    whole = [("nvidia.com/gpu", gpu_uuid(index)) for index in range(GPU_COUNT) if index not in (2, DRA_GPU)]
    return whole + [("nvidia.com/gpu.shared", f"{gpu_uuid(2)}::{replica}") for replica in range(4)]


# GPU 1's device plugin reports it unhealthy (as after an XID 79): trainer-0's pod status says so.
UNHEALTHY_GPU = 1
# trainer-0 was admitted through Kueue: it names the ml-team LocalQueue, which draws on the research
# ClusterQueue's quota. llm-server-a's Deployment names a KAI Scheduler Queue, a leaf under "org";
# llm-server-b is in no queue.

SIMULATED_PODS = (
    SimulatedPod("ml-team", "trainer-0", ("StatefulSet", "trainer"), ("pytorch",),
                 {"nvidia.com/gpu": {gpu_uuid(0): "Healthy", gpu_uuid(UNHEALTHY_GPU): "Unhealthy"}}, LOCAL_QUEUE),
    SimulatedPod("inference", "llm-server-a", ("ReplicaSet", "llm-server-a-7d9f8"), ("vllm",),
                 {"nvidia.com/gpu.shared": {gpu_uuid(2) + "::0": "Healthy", gpu_uuid(2) + "::3": "Healthy"}},
                 kai_queue=KAI_QUEUE),
    SimulatedPod("inference", "llm-server-b", ("ReplicaSet", "llm-server-b-5c6d4"), ("vllm",),
                 {"nvidia.com/gpu.shared": {gpu_uuid(2) + "::1": "Healthy"}}),
    # A notebook granted no GPU, whose image sees every GPU anyway (NVIDIA_VISIBLE_DEVICES=all).
    SimulatedPod("research", "notebook-7", ("StatefulSet", "notebook"), ("jupyter",), {}),
)


class SimulatedProcess(NamedTuple):
    """One process NVML lists on a GPU: its share of the GPU's load and of its used framebuffer."""

    pid: int
    gpu: int
    sm_part: float  # of the GPU's SM load
    memory_part: float  # of the GPU's used framebuffer
    pod: Optional[Tuple[str, str]]  # (namespace, name); None: a host process in no pod
    container: str = ""

    def memory_bytes(self, elapsed: float) -> int:
        used_mib = FB_MIB * max(gpu_load(self.gpu, elapsed), 0.05)
        return int(used_mib * self.memory_part) << 20


# llm-server-b holds its replica but runs nothing on it (held, idle); a host process and the
# notebook use GPUs they were never given.
SIMULATED_PROCESSES = (
    SimulatedProcess(41201, 0, 0.93, 0.90, ("ml-team", "trainer-0"), "pytorch"),
    SimulatedProcess(41202, 1, 0.97, 0.95, ("ml-team", "trainer-0"), "pytorch"),
    SimulatedProcess(52310, 2, 0.70, 0.75, ("inference", "llm-server-a"), "vllm"),
    SimulatedProcess(52377, 2, 0.12, 0.10, ("inference", "llm-server-a"), "vllm"),
    SimulatedProcess(1893, 2, 0.05, 0.05, None),  # a host service (outside Kubernetes) on the shared GPU
    SimulatedProcess(60422, 0, 0.04, 0.06, ("research", "notebook-7"), "jupyter"),
)


def pod_named(namespace: str, name: str) -> SimulatedPod:
    return next(pod for pod in SIMULATED_PODS if (pod.namespace, pod.name) == (namespace, name))
