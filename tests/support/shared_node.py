"""A GPU node for process-mode end-to-end tests: a gRPC kubelet, an HTTP dcgm-exporter, a Kubernetes
API server speaking REST + watch, the fake libnvidia-ml.so.1 in C (loaded by the real nvidia-ml-py
in the exporter process through LD_LIBRARY_PATH) and a fake /proc tree; plus readers of the output."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Dict, List

from support.fake_dcgm import FakeDcgmExporter
from support.fake_kube_api import FakeKubeApi, make_pod, write_kubeconfig
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes
from support.nvml_node import NODE_ENV, FakeNode
from support.proc_tree import ProcTree
from support.scrape_checks import scrape
from support.waiting import wait_until

L4_FIXTURE = "dcgm/l4-aws-gpu-operator-default-counters.prom"  # one whole GPU
L4 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
A800_FIXTURE = "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom"  # GPU 0 in MIG (GI 3, 5, 6), 1-7 whole
A800_GPU0 = "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"
MIG_GI3 = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"
MIB = 1024 * 1024
NODE = "gpu-node-1"
SHARE_FAMILIES = ("pod_gpu_container_memory_used_bytes", "pod_gpu_container_sm_utilization_ratio",
                  "pod_gpu_unattributed_memory_used_bytes", "pod_gpu_unattributed_sm_utilization_ratio",
                  "pod_gpu_exporter_unattributed_processes", "pod_gpu_container_energy_joules_total",
                  "pod_gpu_unattributed_energy_joules_total", "pod_gpu_container_idle_seconds_total",
                  "pod_gpu_exporter_nvml_up", "pod_gpu_exporter_process_shares_refresh_duration_seconds")
# What --health.xid-events adds (on by default in process mode): XID counters, lost GPUs, its status.
XID_FAMILIES = ("pod_gpu_device_xid_errors_total", "pod_gpu_container_xid_errors_total", "pod_gpu_device_lost",
                "pod_gpu_exporter_xid_events_up")
# Each pod's numbers, which process mode makes from the shares (and device mode from the devices' figures).
POD_NUMBER_FAMILIES = ("pod_gpu_utilization_ratio", "pod_gpu_memory_used_bytes")
# Values that differ from one scrape to the next whatever the mode.
_PER_SCRAPE = re.compile(r"^pod_gpu_exporter_(scrape_duration_seconds|mapping_age_seconds) ")


class SharedNode:
    """One GPU node: what the kubelet, NVML, the API server and /proc say, and the exporter on it."""

    def __init__(self, tmp_path: Path, socket_dir: Path, library_dir: Path, run_exporter):
        self.kubelet = FakeKubelet(str(socket_dir / "kubelet.sock")).start()
        self.api = FakeKubeApi().start()
        self.kubeconfig = write_kubeconfig(str(tmp_path / "kubeconfig"), self.api.url)
        self.nvml = FakeNode(tmp_path / "nvml-node.txt")
        self.proc = ProcTree(tmp_path / "proc")
        self.library_dir = library_dir
        self.dcgm = None
        self._run_exporter = run_exporter
        self.pods: Dict[str, dict] = {}

    def add_pod(self, name: str, containers=("main",), namespace: str = "ml", labels=None) -> dict:
        """A running pod in the API; its containers get 64-hex runtime IDs, as containerd gives."""
        pod = make_pod(namespace, name, NODE, labels=labels, containers=containers)
        for status in pod["status"]["containerStatuses"]:
            status["containerID"] = "containerd://" + uuid.uuid4().hex + uuid.uuid4().hex
        self.api.put("v1", "pods", pod)
        self.pods[name] = pod
        return pod

    def container_id(self, pod: str, container: str = "main") -> str:
        statuses = self.pods[pod]["status"]["containerStatuses"]
        return next(s["containerID"].partition("://")[2] for s in statuses if s["name"] == container)

    def run_in(self, pid: int, pod: str, container: str = "main", **layout) -> None:
        self.proc.container_process(pid, self.pods[pod]["metadata"]["uid"], self.container_id(pod, container), **layout)

    def start(self, dcgm_fixture: str = L4_FIXTURE, mode: "str | None" = "process", api: bool = True, extra=()):
        """The exporter on this node; mode None leaves --sharing.mode at its default."""
        if self.dcgm is None:
            self.dcgm = FakeDcgmExporter(fixture_bytes(dcgm_fixture)).start()
        args = ["--dcgm.url", self.dcgm.url, "--kubelet.socket", self.kubelet.socket_path,
                "--kubelet.refresh-interval", "200ms", "--sharing.proc-root", str(self.proc.root),
                "--kubernetes.node-name", NODE, *(["--sharing.mode", mode] if mode else []), *extra]
        args += ["--kubernetes.kubeconfig", self.kubeconfig] if api else ["--kubernetes.api", "off"]
        env = {"LD_LIBRARY_PATH": str(self.library_dir), NODE_ENV: str(self.nvml.path)}
        return self._run_exporter(args, env=env)

    def stop(self) -> None:
        for fake in (self.dcgm, self.api, self.kubelet):
            if fake is not None:
                fake.stop()


def series(text: str, family: str) -> Dict[str, str]:
    """label text → value of every sample of one family."""
    found = {}
    for line in text.splitlines():
        if line.startswith(family + "{"):
            labels, _, value = line[len(family) + 1:].rpartition("} ")
            found[labels] = value
    return found


def holder_labels(pod: str, uuid_: str = L4, gpu: str = "0", instance: str = "", container: str = "main",
                  namespace: str = "ml") -> str:
    device = f'UUID="{uuid_}",gpu="{gpu}"' + (f',GPU_I_ID="{instance}"' if instance else "")
    return f'{device},namespace="{namespace}",pod="{pod}",container="{container}"'


def without_shares(text: str) -> List[str]:
    return [line for line in text.splitlines()
            if not any(family in line for family in SHARE_FAMILIES + XID_FAMILIES + POD_NUMBER_FAMILIES)
            and not _PER_SCRAPE.match(line)]


def shares_served(exporter, family="pod_gpu_container_memory_used_bytes", count=1):
    """Poll until the family has at least `count` samples; returns the scrape's text."""
    def ready():
        text = scrape(exporter).text
        return text if len(series(text, family)) >= count else None

    return wait_until(ready)
