"""`demo`: a whole simulated GPU node — a gRPC kubelet, a moving dcgm-exporter, NVML, /proc and an API server."""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from exporter.collectors.registry import Registry
from exporter.config import Config
from exporter.demo.cluster import start_api_server, write_hpc_job_files, write_proc_tree
from exporter.demo.explain import explain
from exporter.demo.fake_dcgm import FakeDcgmExporter
from exporter.demo.fake_kubelet import FakeKubelet
from exporter.demo.nvml import SimulatedNvml
from exporter.demo.workload import (FB_MIB, GPU_COUNT, NODE_NAME, SIMULATED_PROCESSES,
                                    gpu_energy_mj, gpu_load, gpu_uuid, simulated_allocations, simulated_offered)

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


def run_demo(config: Config, serve: Callable[..., int]) -> int:
    """Start the simulated node, then serve it exactly as production would."""
    workdir = Path(tempfile.mkdtemp(prefix="pod-gpu-demo-"))
    socket_path = str(workdir / "kubelet.sock")
    kubelet = FakeKubelet(socket_path)
    kubelet.set_devices(simulated_allocations())
    kubelet.set_allocatable(simulated_offered())
    dcgm = FakeDcgmExporter(SimulatedDcgm(TEMPLATE.read_text()).render)
    simulate_nvml = config.demo_nvml == "on"
    api = nvml = None
    try:
        kubelet.start()
        dcgm.start()
        write_proc_tree(workdir / "proc")
        write_hpc_job_files(workdir / "hpc-jobs")
        api = start_api_server(workdir / "kubeconfig")
        nvml = SimulatedNvml(list(SIMULATED_PROCESSES), ready=api.pods_watched) if simulate_nvml else None
        # parse_config has refused --kubelet.socket, --dcgm.*, --kubernetes.*, --sharing.*, --health.xid-events and
        # --hpc.job-mapping-dir for the demo, so nothing the user asked for is overridden here; its short refresh
        # interval is a default there, which --kubelet.refresh-interval replaces. --labels.extra is added to.
        demo_config = dataclasses.replace(
            config, command="serve", kubelet_socket=socket_path, dcgm_url=dcgm.url, dcgm_file=None,
            kubernetes_api="on", kubernetes_kubeconfig=str(workdir / "kubeconfig"), kubernetes_node_name=NODE_NAME,
            labels_extra=demo_labels_extra(config.labels_extra),
            hpc_job_mapping_dir=str(workdir / "hpc-jobs"),  # a Slurm job on GPU 3: pod_gpu_hpc_job_info
            # --demo.nvml off: device-level samples only, as a node without NVML serves them.
            **(dict(sharing_mode="process", sharing_proc_root=str(workdir / "proc")) if simulate_nvml else {}),
        )
        ready = functools.partial(explain, socket_path=socket_path, dcgm_url=dcgm.url, nvml=simulate_nvml,
                                  mapping=mapping_command(_invoked_as(), socket_path), top=_invoked_as())
        # The simulation reaches every collector that reads NVML through the registry's driver binding,
        # which a real node leaves at the driver's library.
        return serve(demo_config, on_ready=ready, registry=Registry(demo_config, driver=nvml))
    finally:
        if nvml is not None:
            nvml.close()
        if api is not None:
            api.stop()
        dcgm.stop()
        kubelet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def demo_labels_extra(asked: str) -> str:
    """--labels.extra as the demo serves it: what the user asked for (workload, pod_uid, from its API server's
    pods and their owners), and always queue: trainer-0 is queued through Kueue, so its samples carry
    cluster_queue and local_queue."""
    chosen = [part.strip() for part in asked.split(",") if part.strip()]
    return ",".join(chosen + ([] if "queue" in chosen else ["queue"]))


def mapping_command(program: str, socket_path: str) -> str:
    """The command that prints the simulated node's GPU -> pod table, ready to paste."""
    return f"{program} mapping --kubelet.socket {shlex.quote(socket_path)}"


def _invoked_as() -> str:
    """This process's command as typed (`.venv/bin/pod-gpu-metrics-exporter`, `python -m exporter`)."""
    program = sys.argv[0] if sys.argv and sys.argv[0] else "pod-gpu-metrics-exporter"
    if Path(program).name == "__main__.py":  # python -m exporter: argv[0] is the module's file
        return f"{shlex.quote(sys.executable)} -m exporter"
    return shlex.quote(program)
