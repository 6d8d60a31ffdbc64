"""NVIDIA's demo node: four L4 GPUs behind a moving dcgm-exporter, NVML, /proc, a DRA ResourceSlice and a Slurm job."""

from __future__ import annotations

import re
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from exporter.demo.cluster import DemoKubeApi, SimulatedCluster, write_job_mapping_files
from exporter.demo.fake_upstream import FakeUpstreamExporter
from exporter.demo.simulated_node import DemoServing
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.demo.explain import simulated_text
from exporter.vendors.nvidia.demo.nvml import SimulatedNvml
from exporter.vendors.nvidia.demo.workload import (DRA_DRIVER, DRA_GPU, DRA_TAINT, FB_MIB, GPU_COUNT, HPC_JOBS,
                                                   NODE_NAME, SIMULATED_PODS, SIMULATED_PROCESSES, gpu_energy_mj,
                                                   gpu_load, gpu_uuid, pod_named, simulated_allocations,
                                                   simulated_offered)

# A real scrape of one NVIDIA L4 node (dcgm-exporter 4.x, GPU operator defaults) is the template;
# the simulated node has four such GPUs.
TEMPLATE = Path(__file__).with_name("data") / "l4-aws-gpu-operator-default-counters.prom"
TEMPLATE_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


class SimulatedDcgm:
    """Renders the template for GPU_COUNT GPUs, with values that move over time like a real node's."""

    def __init__(self, template: str, clock: Callable[[], float] = time.monotonic):
        self._families = _split_families(template)
        self._clock = clock
        self._started = clock()

    def render(self) -> bytes:
        elapsed = self._clock() - self._started
        lines: List[str] = []
        for header, samples in self._families:
            lines += header
            for gpu in range(GPU_COUNT):
                for labels, value in samples:
                    lines.append(f"{_relabel(labels, gpu)} {self._value(labels, value, gpu, elapsed)}")
        return ("\n".join(lines) + "\n").encode()

    @staticmethod
    def _value(labels: str, template_value: str, gpu: int, elapsed: float) -> str:
        name = labels.split("{", 1)[0]
        load = gpu_load(gpu, elapsed)
        moving: Dict[str, str] = {
            "DCGM_FI_DEV_GPU_UTIL": f"{round(100 * load)}",
            "DCGM_FI_DEV_MEM_COPY_UTIL": f"{round(60 * load)}",
            "DCGM_FI_DEV_SM_CLOCK": f"{round(210 + 1830 * load)}",
            "DCGM_FI_DEV_GPU_TEMP": f"{round(31 + 45 * load)}",
            "DCGM_FI_DEV_POWER_USAGE": f"{16.365 + 55.0 * load:f}",
            "DCGM_FI_DEV_FB_USED": f"{round(FB_MIB * load)}",
            "DCGM_FI_DEV_FB_FREE": f"{22563 - round(FB_MIB * load)}",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{load:f}",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": f"{0.6 * load:f}",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": f"{gpu_energy_mj(gpu, elapsed)}",
        }
        return moving.get(name, template_value)


def _split_families(template: str) -> List[Tuple[List[str], List[Tuple[str, str]]]]:
    """[(HELP/TYPE lines, [(name{labels}, value)])] in template order."""
    families: List[Tuple[List[str], List[Tuple[str, str]]]] = []
    for line in template.splitlines():
        if line.startswith("#"):
            if not families or families[-1][1]:
                families.append(([], []))
            families[-1][0].append(line)
        elif line.strip():
            labels, value = line.rsplit(" ", 1)
            families[-1][1].append((labels, value))
    return families


def _relabel(labels: str, gpu: int) -> str:
    labels = labels.replace(TEMPLATE_UUID, gpu_uuid(gpu))
    labels = labels.replace('gpu="0"', f'gpu="{gpu}"').replace('device="nvidia0"', f'device="nvidia{gpu}"')
    return re.sub(r'pci_bus_id="00000000:31:00.0"', f'pci_bus_id="00000000:{0x31 + gpu:02X}:00.0"', labels)


class NvidiaDemoNode:
    """The simulated NVIDIA node (exporter.demo.simulated_node.SimulatedNode): GPUs 0 and 1 whole, GPU 2
    time-sliced, GPU 3 published by NVIDIA's DRA driver and given to a Slurm job."""

    @property
    def cluster(self) -> SimulatedCluster:
        return SimulatedCluster(NODE_NAME, SIMULATED_PODS, (resource_slice_object(),))

    def allocations(self) -> List[AllocatedDevice]:
        return simulated_allocations()

    def offered(self) -> List[Tuple[str, str]]:
        return simulated_offered()

    def start(self, workdir: Path, api: DemoKubeApi, config, stack: ExitStack) -> DemoServing:
        """dcgm-exporter over HTTP, the /proc tree and the job-mapping folder, and (--demo.nvml on) NVML."""
        dcgm = FakeUpstreamExporter(SimulatedDcgm(TEMPLATE.read_text()).render, name="dcgm-exporter")
        dcgm.start()
        stack.callback(dcgm.stop)
        write_proc_tree(workdir / "proc")
        write_job_mapping_files(workdir / "hpc-jobs", HPC_JOBS)
        simulate_nvml = config.demo_nvml == "on"
        nvml = SimulatedNvml(list(SIMULATED_PROCESSES), ready=api.pods_watched) if simulate_nvml else None
        if nvml is not None:
            stack.callback(nvml.close)
        settings = dict(
            dcgm_url=dcgm.url, dcgm_file=None,
            hpc_job_mapping_dir=str(workdir / "hpc-jobs"),  # a Slurm job on GPU 3: pod_gpu_hpc_job_info
            # --demo.nvml off: device-level samples only, as a node without NVML serves them.
            **(dict(sharing_mode="process", sharing_proc_root=str(workdir / "proc")) if simulate_nvml else {}))
        return DemoServing(settings, lambda url: simulated_text(url, dcgm.url, nvml=simulate_nvml), driver=nvml)


def resource_slice_object() -> dict:
    """The ResourceSlice NVIDIA's DRA driver publishes for this node: GPU 3, with the attributes it writes and
    its taint (the exporter matches the device to dcgm's samples by its `uuid`)."""
    device = {"name": f"gpu-{DRA_GPU}",
              "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid(DRA_GPU)},
                             "index": {"int": DRA_GPU}, "minor": {"int": DRA_GPU},
                             "productName": {"string": "NVIDIA L4"}, "brand": {"string": "Nvidia"},
                             "architecture": {"string": "Ada Lovelace"}, "cudaComputeCapability": {"version": "8.9.0"},
                             "driverVersion": {"version": "580.105.8"}, "cudaDriverVersion": {"version": "13.0.0"},
                             "pcieBusID": {"string": f"0000:{0x31 + DRA_GPU:02X}:00.0"}},
              "capacity": {"memory": {"value": "23034Mi"}},
              "taints": [dict(DRA_TAINT)]}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE_NAME}-{DRA_DRIVER}-q7m2x"},
            "spec": {"driver": DRA_DRIVER, "nodeName": NODE_NAME, "devices": [device],
                     "pool": {"name": NODE_NAME, "generation": 1, "resourceSliceCount": 1}}}


def write_proc_tree(root: Path) -> None:
    """<root>/<pid>/cgroup for every simulated GPU process, as the host's /proc shows them (cgroup v2, systemd
    driver, containerd): what --sharing.proc-root reads to tell each process's pod and container."""
    for process in SIMULATED_PROCESSES:
        if process.pod is None:
            path = "/system.slice/ollama.service"
        else:
            pod = pod_named(*process.pod)
            pod_slice = f"kubepods-burstable-pod{pod.uid.replace('-', '_')}.slice"
            path = f"/kubepods.slice/kubepods-burstable.slice/{pod_slice}/cri-containerd-{pod.container_id(process.container)}.scope"
        folder = root / str(process.pid)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup").write_text(f"0::{path}\n")
