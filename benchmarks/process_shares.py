"""Benchmark: what one --sharing.mode process refresh costs (NVML + /proc + shares) on an 8-GPU node.

Run from the repository root: `python benchmarks/process_shares.py` (a few seconds), or with
`--iterations 20` for a quick check. Needs a C compiler: NVML is the fake libnvidia-ml.so.1 of the
tests (tests/support/fake_nvml/fake_nvml.c), driven through the real nvidia-ml-py binding. The node: 8 GPUs,
each time-sliced into 4 replicas held by 32 pods; 50 processes on the GPUs — 40 in holding pods (8 pods
with two), 5 in pods holding no GPU, 5 host processes; a per-process SM sample for each.

What the figures mean: the binding's and our own work per refresh, and the /proc reads, are measured;
the driver's own time per NVML call is not (the fake answers from memory), so the number of NVML calls
per refresh is printed too — multiply by a real driver's per-call latency to estimate its share.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
from exporter.core.mapping import build_mapping  # noqa: E402
from exporter.shares.compute import PodContainers, compute_shares  # noqa: E402
from exporter.shares.render import render_shares  # noqa: E402
from exporter.shares.process_shares import ProcessShares  # noqa: E402
from exporter.sources.kubelet import AllocatedDevice  # noqa: E402
from exporter.sources.nvml.processes import NvmlProcessReader  # noqa: E402
from exporter.sources.procfs import read_process_owner  # noqa: E402
from support.nvml_node import NODE_ENV, FakeNode, build_fake_nvml, preload  # noqa: E402
from support.proc_tree import ProcTree  # noqa: E402

GPUS, REPLICAS, PROCESSES = 8, 4, 50
MIB = 1024 * 1024


class CountingNvml:
    """The pynvml module, counting every NVML function called through it (the binding is the outside world)."""

    def __init__(self, module):
        self._module = module
        self.calls = 0

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not (name.startswith("nvml") and callable(value)):
            return value

        def counted(*args, **kwargs):
            self.calls += 1
            return value(*args, **kwargs)
        return counted


def build_node(work: Path):
    """The fake node files, the kubelet's mapping and the API's pod index."""
    nvml, proc = FakeNode(work / "nvml-node.txt"), ProcTree(work / "proc")
    devices, pods, pid = [], {}, 1000
    uuids = [f"GPU-{index:08x}-0000-4000-8000-{index:012x}" for index in range(GPUS)]
    for index, gpu_uuid in enumerate(uuids):
        nvml.gpu(index, gpu_uuid)
        for replica in range(REPLICAS):
            name = f"trainer-{index}-{replica}"
            uid, container_id = f"{index:08x}-{replica:04x}-4000-8000-000000000000", f"{index:032x}{replica:032x}"
            pods[uid] = PodContainers("ml", name, {container_id: "main"})
            devices.append(AllocatedDevice("ml", name, "main", "nvidia.com/gpu", f"{gpu_uuid}::{replica}"))
    holders = list(pods.items())
    for number in range(PROCESSES):
        pid += 1
        if number < 40:  # 32 holders, 8 of them with a second process, on the GPU their pod holds
            uid, pod = holders[number % len(holders)]
            gpu_uuid = uuids[int(pod.pod.split("-")[1])]
            proc.container_process(pid, uid, next(iter(pod.containers)))
        elif number < 45:  # pods holding no GPU (e.g. sharing one they were not given)
            gpu_uuid = uuids[number % GPUS]
            proc.container_process(pid, f"ffffffff-{number:04x}-4000-8000-000000000000", "e" * 64)
        else:
            gpu_uuid = uuids[number % GPUS]
            proc.host_process(pid)
        nvml.process(gpu_uuid, pid, (number + 1) * 64 * MIB).sample(gpu_uuid, pid, number % 50)
    nvml.write()
    return nvml, proc, build_mapping(devices), pods


def timed(action: Callable[[], object], iterations: int):
    """(wall ms per call: median, p95, min; CPU ms per call)."""
    walls = []
    cpu_start = time.process_time()
    for _ in range(iterations):
        started = time.perf_counter()
        action()
        walls.append((time.perf_counter() - started) * 1000)
    cpu = (time.process_time() - cpu_start) * 1000 / iterations
    walls.sort()
    return statistics.median(walls), walls[int(len(walls) * 0.95) - 1], walls[0], cpu


def report(label: str, figures) -> None:
    median, p95, best, cpu = figures
    print(f"{label:<44} median {median:7.3f} ms   p95 {p95:7.3f} ms   min {best:7.3f} ms   CPU {cpu:7.3f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shares-bench-") as folder:
        work = Path(folder)
        nvml_node, proc, mapping, pods = build_node(work)
        os.environ[NODE_ENV] = str(nvml_node.path)
        preload(build_fake_nvml(work))
        import pynvml

        nvml = CountingNvml(pynvml)
        nvml.nvmlInit()
        shares = ProcessShares(lambda: (nvml, ""), lambda: mapping, lambda: pods, str(proc.root), 5.0, "kubernetes")
        shares.refresh()  # warm: library loaded, function pointers cached
        text = shares.text().decode()
        print(f"node: {GPUS} GPUs x {REPLICAS} time-sliced replicas = {len(pods)} holding pods; {PROCESSES} GPU processes "
              f"(40 in holders, 5 in other pods, 5 on the host); {args.iterations} iterations")
        print(f"series served: {text.count('pod_gpu_container_memory_used_bytes{')} memory, "
              f"{text.count('pod_gpu_container_sm_utilization_ratio{')} SM, "
              f"{text.count('pod_gpu_exporter_unattributed_processes{')} unattributed gauges; {len(text)} bytes")
        before = nvml.calls
        shares.refresh()
        print(f"NVML calls per refresh: {nvml.calls - before}")
        report("whole refresh (NVML + /proc + shares)", timed(shares.refresh, args.iterations))
        reader = NvmlProcessReader(nvml, 5.0)
        report("  NVML reading (binding + fake library)", timed(reader.read, args.iterations))
        pids = [int(p) for p in os.listdir(proc.root)]
        report(f"  /proc/<pid>/cgroup of {len(pids)} PIDs (test tree)",
               timed(lambda: [read_process_owner(str(proc.root), pid) for pid in pids], args.iterations))
        devices = reader.read()
        owners = {pid: read_process_owner(str(proc.root), pid) for pid in pids}
        report("  shares computed and rendered",
               timed(lambda: render_shares(compute_shares(devices, mapping, owners, pods), "kubernetes"), args.iterations))
        live = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:PROCESSES]
        report(f"  real /proc: cgroup of {len(live)} live processes", timed(lambda: [_read_live(pid) for pid in live],
                                                                           args.iterations))
    return 0


def _read_live(pid: int):
    try:
        return read_process_owner("/proc", pid)
    except OSError:  # exited while the benchmark ran
        return None


if __name__ == "__main__":
    sys.exit(main())
