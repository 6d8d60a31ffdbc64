"""Benchmark: what one --sharing.mode process refresh costs (NVML + /proc + shares + energy) on an 8-GPU node.

Run from the repository root: `python benchmarks/process_shares.py` (a few seconds), or with
`--iterations 20` for a quick check. `--baseline <git revision>` also times the refresh of the code at
that revision (e.g. the commit before a change), in a child process, in rounds interleaved with this
code's so that both see the same machine load, and prints the ratio.

Needs a C compiler: NVML is the fake libnvidia-ml.so.1 of the tests (tests/support/fake_nvml/fake_nvml.c),
driven through the real nvidia-ml-py binding. The node: 8 GPUs, each time-sliced into 4 replicas held by
32 pods; 50 processes on the GPUs — 40 in holding pods (8 pods with two), 5 in pods holding no GPU, 5
host processes; a per-process SM sample for each; every board drawing power, so its energy counter moves.

What the figures mean: the binding's and our own work per refresh, and the /proc reads, are measured;
the driver's own time per NVML call is not (the fake answers from memory), so the number of NVML calls
per refresh is printed too — multiply by a real driver's per-call latency to estimate its share.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, List

REPO_ROOT = Path(__file__).resolve().parents[1]
# A baseline child imports the `exporter` package of another revision, extracted to --child-root.
_CHILD_ROOT = sys.argv[sys.argv.index("--child-root") + 1] if "--child-root" in sys.argv else None
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
if _CHILD_ROOT:
    sys.path.insert(0, _CHILD_ROOT)
from exporter.core.mapping import build_mapping  # noqa: E402
from exporter.vendors.nvidia.shares.compute import PodContainers  # noqa: E402
from exporter.vendors.nvidia.shares.process_shares import ProcessShares  # noqa: E402

try:
    from exporter.vendors.nvidia.shares.process_shares import ProcessSharesOptions  # noqa: E402
except ImportError:  # a --baseline revision from before ProcessShares took its settings as one value
    ProcessSharesOptions = None
from exporter.sources.kubelet import AllocatedDevice  # noqa: E402
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
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
        nvml.gpu(index, gpu_uuid).energy(gpu_uuid, 10**9 * (index + 1), milliwatts=300_000 + 1_001 * index)
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
    return nvml, proc, build_mapping(DEVICE_FORMS, devices), pods


def walls(action: Callable[[], object], iterations: int) -> List[float]:
    """Wall milliseconds of each call."""
    found = []
    for _ in range(iterations):
        started = time.perf_counter()
        action()
        found.append((time.perf_counter() - started) * 1000)
    return found


def measured(action: Callable[[], object], iterations: int) -> dict:
    """Wall milliseconds of each call, and the process's CPU milliseconds for all of them: CPU time is
    what a busy machine disturbs least, so the before/after ratio is given in it too."""
    cpu_start = time.process_time()
    found = walls(action, iterations)
    return {"walls": found, "cpu_ms": (time.process_time() - cpu_start) * 1000}


def timed(action: Callable[[], object], iterations: int):
    """(wall ms per call: median, p95, min; CPU ms per call)."""
    cpu_start = time.process_time()
    found = sorted(walls(action, iterations))
    cpu = (time.process_time() - cpu_start) * 1000 / iterations
    return statistics.median(found), found[int(len(found) * 0.95) - 1], found[0], cpu


def report(label: str, figures) -> None:
    median, p95, best, cpu = figures
    print(f"{label:<48} median {median:7.3f} ms   p95 {p95:7.3f} ms   min {best:7.3f} ms   CPU {cpu:7.3f} ms")


def report_rounds(label: str, rounds: List[dict]) -> tuple:
    """Prints the rounds' figures; returns (median wall ms, CPU ms) per call."""
    found = sorted(wall for one in rounds for wall in one["walls"])
    median, cpu = statistics.median(found), sum(one["cpu_ms"] for one in rounds) / len(found)
    print(f"{label:<48} median {median:7.3f} ms   p95 {found[int(len(found) * 0.95) - 1]:7.3f} ms   "
          f"min {found[0]:7.3f} ms   CPU {cpu:7.3f} ms")
    return median, cpu


def open_shares(node, library: Path, **options):
    """A ProcessShares over the node (build_node's), warmed by one refresh, and the counting binding."""
    nvml_node, proc, mapping, pods = node
    os.environ[NODE_ENV] = str(nvml_node.path)
    preload(library)
    import pynvml

    nvml = CountingNvml(pynvml)
    nvml.nvmlInit()
    collaborators = (lambda: (nvml, ""), lambda: mapping, lambda: pods)
    if ProcessSharesOptions is None:
        shares = ProcessShares(*collaborators, str(proc.root), 5.0, "kubernetes", **options)
    else:
        shares = ProcessShares(ProcessSharesOptions(str(proc.root), 5.0, "kubernetes"), *collaborators, **options)
    shares.refresh()  # warm: library loaded, function pointers cached, energy baseline read
    return shares, nvml


def child(iterations: int, library: Path) -> int:
    """Baseline mode: time the whole refresh of the revision under --child-root; print the walls as JSON."""
    with tempfile.TemporaryDirectory(prefix="shares-bench-baseline-") as folder:
        shares, _nvml = open_shares(build_node(Path(folder)), library)
        print(json.dumps(measured(shares.refresh, iterations)))
    return 0


def extract(revision: str, into: Path) -> Path:
    """The `exporter` package as it was at a git revision."""
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", revision, "exporter"], capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds the iterations are run in")
    parser.add_argument("--baseline", help="a git revision whose refresh is timed too, for a before/after ratio")
    parser.add_argument("--child-root", help=argparse.SUPPRESS)
    parser.add_argument("--library", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_root:
        return child(args.iterations, Path(args.library))
    with tempfile.TemporaryDirectory(prefix="shares-bench-") as folder:
        work = Path(folder)
        library = build_fake_nvml(work)
        node = build_node(work)
        _nvml_node, proc, mapping, pods = node
        shares, nvml = open_shares(node, library)
        without_energy, _ = open_shares(node, library, read_energy=False)
        text = shares.text().decode()
        print(f"node: {GPUS} GPUs x {REPLICAS} time-sliced replicas = {len(pods)} holding pods; {PROCESSES} GPU processes "
              f"(40 in holders, 5 in other pods, 5 on the host); {args.iterations} iterations in {args.rounds} rounds")
        print(f"series served: {text.count('pod_gpu_container_memory_used_bytes{')} memory, "
              f"{text.count('pod_gpu_container_sm_utilization_ratio{')} SM, "
              f"{text.count('pod_gpu_exporter_unattributed_processes{')} unattributed gauges, "
              f"{text.count('pod_gpu_unattributed_memory_used_bytes{')} unattributed memory, "
              f"{text.count('pod_gpu_container_energy_joules_total{')} energy, "
              f"{text.count('pod_gpu_container_idle_seconds_total{')} idle; {len(text)} bytes")
        before = nvml.calls
        shares.refresh()
        print(f"NVML calls per refresh: {nvml.calls - before}")
        baseline_root = extract(args.baseline, work / "baseline") if args.baseline else None
        per_round = max(args.iterations // args.rounds, 1)
        found = {"on": [], "off": [], "baseline": []}
        for _ in range(args.rounds):
            found["on"].append(measured(shares.refresh, per_round))
            found["off"].append(measured(without_energy.refresh, per_round))
            if baseline_root is not None:
                found["baseline"].append(json.loads(subprocess.run(
                    [sys.executable, __file__, "--iterations", str(per_round), "--child-root", str(baseline_root),
                     "--library", str(library)], capture_output=True, text=True, check=True).stdout))
        on = report_rounds("whole refresh (NVML + /proc + shares + energy)", found["on"])
        off = report_rounds("  the same without the energy reads", found["off"])
        print(f"  energy's cost: x{on[0] / off[0]:.2f} wall, x{on[1] / off[1]:.2f} CPU")
        if baseline_root is not None:
            base = report_rounds(f"  the refresh of {args.baseline}", found["baseline"])
            print(f"  this code against {args.baseline}: x{on[0] / base[0]:.2f} wall, x{on[1] / base[1]:.2f} CPU")
        _breakdown(args.iterations, nvml, proc, mapping, pods)
    return 0


def _breakdown(iterations: int, nvml, proc, mapping, pods) -> None:
    from exporter.vendors.nvidia.shares.compute import compute_shares
    from exporter.vendors.nvidia.shares.ledger import ShareLedger
    from exporter.vendors.nvidia.shares.render import render_shares
    from exporter.vendors.nvidia.nvml.processes import NvmlProcessReader
    from exporter.sources.procfs import read_process_owner

    reader = NvmlProcessReader(nvml, 5.0)
    report("  NVML reading (binding + fake library)", timed(reader.read, iterations))
    pids = [int(p) for p in os.listdir(proc.root)]
    report(f"  /proc/<pid>/cgroup of {len(pids)} PIDs (test tree)",
           timed(lambda: [read_process_owner(str(proc.root), pid) for pid in pids], iterations))
    devices = reader.read()
    owners = {pid: read_process_owner(str(proc.root), pid) for pid in pids}
    ledger = ShareLedger("split")

    def computed_and_rendered():
        shares = compute_shares(devices, mapping, owners, pods)
        return render_shares(shares, "kubernetes", None, ledger.update(shares, pods, time.monotonic()))

    report("  shares computed and rendered", timed(computed_and_rendered, iterations))
    live = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:PROCESSES]
    report(f"  real /proc: cgroup of {len(live)} live processes", timed(lambda: [_read_live(pid) for pid in live],
                                                                       iterations))


def _read_live(pid: int):
    from exporter.sources.procfs import read_process_owner

    try:
        return read_process_owner("/proc", pid)
    except OSError:  # exited while the benchmark ran
        return None


if __name__ == "__main__":
    sys.exit(main())
