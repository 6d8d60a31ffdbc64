"""`demo`: a whole simulated GPU node — a real gRPC kubelet on a temp socket and a moving dcgm-exporter."""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple
from urllib.parse import urlsplit

from exporter.config import Config
from exporter.demo.fake_dcgm import FakeDcgmExporter
from exporter.demo.fake_kubelet import FakeKubelet
from exporter.sources.kubelet import AllocatedDevice

# A real scrape of one NVIDIA L4 node (dcgm-exporter 4.x, GPU operator defaults) is the template;
# the simulated node has four such GPUs.
TEMPLATE = Path(__file__).with_name("data") / "l4-aws-gpu-operator-default-counters.prom"
TEMPLATE_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
GPU_COUNT = 4


def gpu_uuid(index: int) -> str:
    return f"GPU-5e1f0c3a-{index:04d}-4d2b-9a61-0demo0000{index:03d}"


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


def simulated_offered() -> List[Tuple[str, str]]:
    """What the device plugins offer, held or free (GetAllocatableResources): GPU 2 as 4 time-slicing
    replicas, the others whole."""
    whole = [("nvidia.com/gpu", gpu_uuid(index)) for index in range(GPU_COUNT) if index != 2]
    return whole + [("nvidia.com/gpu.shared", f"{gpu_uuid(2)}::{replica}") for replica in range(4)]


# How busy each simulated GPU is, on average (0..1); GPU 3 is idle.
_LOAD = {0: 0.85, 1: 0.8, 2: 0.45, 3: 0.0}


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
        # Each GPU swings around its own load on a two-minute cycle, shifted so curves differ.
        load = _LOAD[gpu] * (0.8 + 0.2 * math.sin(elapsed / 20.0 + gpu)) if _LOAD[gpu] else 0.0
        moving: Dict[str, str] = {
            "DCGM_FI_DEV_GPU_UTIL": f"{round(100 * load)}",
            "DCGM_FI_DEV_MEM_COPY_UTIL": f"{round(60 * load)}",
            "DCGM_FI_DEV_SM_CLOCK": f"{round(210 + 1830 * load)}",
            "DCGM_FI_DEV_GPU_TEMP": f"{round(31 + 45 * load)}",
            "DCGM_FI_DEV_POWER_USAGE": f"{16.365 + 55.0 * load:f}",
            "DCGM_FI_DEV_FB_USED": f"{round(18000 * load)}",
            "DCGM_FI_DEV_FB_FREE": f"{22563 - round(18000 * load)}",
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": f"{load:f}",
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": f"{0.6 * load:f}",
            # Energy is a counter in mJ: it only grows, at the simulated power draw.
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": f"{int(4742776 + elapsed * (16365 + 55000 * _LOAD[gpu]))}",
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
    try:
        kubelet.start()
        dcgm.start()
        # parse_config has refused --kubelet.socket, --dcgm.*, --kubernetes.* and the API's --labels.*
        # for the demo, so nothing the user asked for is overridden here; its short refresh interval
        # is a default there, which --kubelet.refresh-interval replaces.
        demo_config = dataclasses.replace(
            config, command="serve", kubelet_socket=socket_path, dcgm_url=dcgm.url, dcgm_file=None,
            kubernetes_api="off",  # the simulated pods exist on no API server, even when run inside a pod
        )
        return serve(demo_config, on_ready=lambda url: _explain(url, socket_path, dcgm.url))
    finally:
        dcgm.stop()
        kubelet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def mapping_command(program: str, socket_path: str) -> str:
    """The command that prints the simulated node's GPU -> pod table, ready to paste."""
    return f"{program} mapping --kubelet.socket {shlex.quote(socket_path)}"


def _invoked_as() -> str:
    """This process's command as typed (`.venv/bin/pod-gpu-metrics-exporter`, `python -m exporter`)."""
    program = sys.argv[0] if sys.argv and sys.argv[0] else "pod-gpu-metrics-exporter"
    if Path(program).name == "__main__.py":  # python -m exporter: argv[0] is the module's file
        return f"{shlex.quote(sys.executable)} -m exporter"
    return shlex.quote(program)


def _explain(url: str, socket_path: str, dcgm_url: str) -> None:
    parts = urlsplit(url)
    root = f"{parts.scheme}://{parts.netloc}"
    print(
        f"""
pod-gpu-metrics-exporter demo: a simulated GPU node, no cluster needed.

  Open {url}
  (also {root}/ for the index, {root}/metrics for the exporter's own metrics)

Simulated: a kubelet PodResources gRPC server on {socket_path}
           and dcgm-exporter at {dcgm_url}, serving 4 NVIDIA L4 GPUs from a real scrape, values moving:
  GPU 0, 1  ml-team/trainer-0/pytorch                       (nvidia.com/gpu, whole GPUs)
  GPU 2     inference/llm-server-a + inference/llm-server-b  (nvidia.com/gpu.shared, time-sliced;
            llm-server-a holds two replicas and still gets one series per sample)
  GPU 3     idle: its samples pass unchanged, without owner labels

The table the exporter works from, as `mapping` prints it on a real node; from another terminal:
  {mapping_command(_invoked_as(), socket_path)}
Press Ctrl+C to stop.
""",
        flush=True,
    )
