"""--sharing.mode process against the real exporter process: a gRPC kubelet, an HTTP dcgm-exporter, a
Kubernetes API server speaking REST + watch, the real nvidia-ml-py over a fake libnvidia-ml.so.1 in C,
and a fake /proc tree."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import wait_until
from exporter.fake_dcgm import FakeDcgmExporter
from exporter.fake_kube_api import FakeKubeApi, make_pod, write_kubeconfig
from exporter.fake_kubelet import FakeKubelet
from exporter.podresources import AllocatedDevice
from fixtures import fixture_bytes
from nvml_node import NODE_ENV, FakeNode, build_fake_nvml
from proc_tree import ProcTree
from test_end_to_end import assert_parses, scrape

L4_FIXTURE = "dcgm/l4-aws-gpu-operator-default-counters.prom"  # one whole GPU
L4 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
A800_FIXTURE = "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom"  # GPU 0 in MIG (GI 3, 5, 6), 1-7 whole
A800_GPU0 = "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"
MIG_GI3 = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"
MIB = 1024 * 1024
NODE = "gpu-node-1"
SHARE_FAMILIES = ("pod_gpu_container_memory_used_bytes", "pod_gpu_container_sm_utilization_ratio",
                  "pod_gpu_exporter_unattributed_processes", "pod_gpu_exporter_nvml_up")
# Values that differ from one scrape to the next whatever the mode.
_PER_SCRAPE = re.compile(r"^pod_gpu_exporter_(scrape_duration_seconds|mapping_age_seconds) ")


@pytest.fixture(scope="module")
def nvml_library_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("fake-nvml")
    build_fake_nvml(directory)
    return directory


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

    def add_pod(self, name: str, containers=("main",), namespace: str = "ml") -> dict:
        """A running pod in the API; its containers get 64-hex runtime IDs, as containerd gives."""
        pod = make_pod(namespace, name, NODE, containers=containers)
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


@pytest.fixture
def node(tmp_path, socket_dir, nvml_library_dir, run_exporter):
    shared = SharedNode(tmp_path, socket_dir, nvml_library_dir, run_exporter)
    yield shared
    shared.stop()


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
            if not any(family in line for family in SHARE_FAMILIES) and not _PER_SCRAPE.match(line)]


def shares_served(exporter, family="pod_gpu_container_memory_used_bytes", count=1):
    """Poll until the family has at least `count` samples; returns the scrape's text."""
    def ready():
        text = scrape(exporter).text
        return text if len(series(text, family)) >= count else None

    return wait_until(ready)


@pytest.mark.parametrize("layout", [
    {"version": 1, "driver": "cgroupfs"},
    {"version": 2, "driver": "systemd"},
    {"version": 2, "driver": "systemd", "runtime": "crio", "qos": "besteffort"},
    {"version": 1, "driver": "systemd", "qos": "guaranteed"},
], ids=["cgroup-v1-cgroupfs", "cgroup-v2-systemd", "cgroup-v2-systemd-crio", "cgroup-v1-systemd"])
def test_three_pods_on_a_time_sliced_gpu_with_zero_one_and_two_processes(node, layout):
    for name in ("idle", "one", "two", "elsewhere"):
        node.add_pod(name)
    node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4}::{replica}")
                              for replica, pod in enumerate(("idle", "one", "two"))])
    node.nvml.gpu(0, L4)
    for pid, pod, used, sm in ((101, "one", 300 * MIB, 20), (201, "two", 1000 * MIB, 30), (202, "two", 24 * MIB, 15),
                               (301, "elsewhere", 7 * MIB, 5)):
        node.nvml.process(L4, pid, used).sample(L4, pid, sm)
        node.run_in(pid, pod, **layout)
    node.nvml.process(L4, 1, 5 * MIB, kind="graphics").write()  # a host process: Xorg
    node.proc.host_process(1, "0::/system.slice/display-manager.service\n")
    exporter = node.start()
    text = shares_served(exporter, count=3)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {
        holder_labels("idle"): "0", holder_labels("one"): str(300 * MIB), holder_labels("two"): str(1024 * MIB)}
    assert series(text, "pod_gpu_container_sm_utilization_ratio") == {
        holder_labels("idle"): "0", holder_labels("one"): "0.2", holder_labels("two"): "0.45"}
    # The host's Xorg and the pod that does not hold this GPU are counted, never given to a holder.
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {f'UUID="{L4}",gpu="0"': "2"}
    assert "pod_gpu_exporter_nvml_up 1" in text
    assert_parses(text)


def test_dcgm_samples_are_byte_exact_and_device_mode_is_unchanged(node, run_exporter):
    node.add_pod("a")
    node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node.nvml.gpu(0, L4).process(L4, 10, MIB).write()
    node.run_in(10, "a")
    process_mode = node.start()
    device_mode = node.start(mode="device")
    default_mode = node.start(mode=None)  # the flag left at its default is device mode
    process_text = shares_served(process_mode)
    device_text, default_text = scrape(device_mode).text, scrape(default_mode).text
    assert without_shares(process_text) == without_shares(device_text)  # dcgm samples and status untouched
    for text in (device_text, default_text):
        assert not any(family in text for family in SHARE_FAMILIES)
    assert without_shares(default_text) == without_shares(device_text)
    assert_parses(process_text)


def test_mps_clients_are_each_their_own_pods(node):
    node.add_pod("client-a")
    node.add_pod("client-b")
    node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu.shared", f"{L4}::{replica}")
                              for replica, pod in enumerate(("client-a", "client-b"))])
    node.nvml.gpu(0, L4)
    node.nvml.process(L4, 500, 40 * MIB)  # nvidia-cuda-mps-server: the MPS control daemon's, not a holder's
    node.proc.host_process(500, "0::/system.slice/nvidia-mps.service\n")
    node.nvml.process(L4, 11, 2000 * MIB, kind="mps").sample(L4, 11, 60)
    node.nvml.process(L4, 12, 500 * MIB, kind="mps").process(L4, 12, 500 * MIB).sample(L4, 12, 25)  # in 2 lists
    node.nvml.write()
    node.run_in(11, "client-a")
    node.run_in(12, "client-b")
    text = shares_served(node.start(), count=2)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {
        holder_labels("client-a"): str(2000 * MIB), holder_labels("client-b"): str(500 * MIB)}
    assert series(text, "pod_gpu_container_sm_utilization_ratio") == {
        holder_labels("client-a"): "0.6", holder_labels("client-b"): "0.25"}
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {f'UUID="{L4}",gpu="0"': "1"}


def test_a_mig_instance_shared_by_two_pods(node):
    node.add_pod("small-a")
    node.add_pod("small-b")
    # MIG-<uuid> device IDs (R470+): resolved to GPU 0's GI 3 through the same fake NVML.
    node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/mig-2g.20gb.shared", f"{MIG_GI3}::{i}")
                              for i, pod in enumerate(("small-a", "small-b"))])
    node.nvml.gpu(0, A800_GPU0).mig(0, 3, MIG_GI3).mig(0, 5, "MIG-5f5f5f5f-6a6a-7b7b-8c8c-9d9d9d9d9d9d")
    node.nvml.process(MIG_GI3, 21, 3000 * MIB).process(MIG_GI3, 22, 900 * MIB).write()
    node.run_in(21, "small-a")
    node.run_in(22, "small-b")
    text = shares_served(node.start(A800_FIXTURE), count=2)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {
        holder_labels("small-a", A800_GPU0, instance="3"): str(3000 * MIB),
        holder_labels("small-b", A800_GPU0, instance="3"): str(900 * MIB)}
    assert "pod_gpu_container_sm_utilization_ratio" not in text  # NVML: NOT_SUPPORTED on MIG instances
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {
        f'UUID="{A800_GPU0}",gpu="0",GPU_I_ID="3"': "0", f'UUID="{A800_GPU0}",gpu="0",GPU_I_ID="5"': "0"}
    # The dcgm samples of GI 3 carry both owners, device-level, as in device mode.
    assert re.search(r'GPU_I_ID="3".*pod="small-a"', text) and re.search(r'GPU_I_ID="3".*pod="small-b"', text)
    assert_parses(text)


def test_a_pid_that_exits_mid_refresh_is_given_to_no_one(node):
    node.add_pod("a")
    node.add_pod("b")
    node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4}::{i}")
                              for i, pod in enumerate(("a", "b"))])
    node.nvml.gpu(0, L4).process(L4, 10, 100 * MIB).process(L4, 20, 200 * MIB).write()
    node.run_in(10, "a")
    node.run_in(20, "b")
    exporter = node.start()
    shares_served(exporter, count=2)
    node.proc.remove(20)  # pod b's process exited: NVML still listed it, its /proc entry is gone

    def b_dropped():
        text = scrape(exporter).text
        return text if series(text, "pod_gpu_container_memory_used_bytes").get(holder_labels("b")) == "0" else None

    text = wait_until(b_dropped)
    assert series(text, "pod_gpu_container_memory_used_bytes")[holder_labels("a")] == str(100 * MIB)
    assert series(text, "pod_gpu_exporter_unattributed_processes") == {f'UUID="{L4}",gpu="0"': "1"}
    node.nvml.lines.remove(f"process {L4} compute 20 {200 * MIB}")
    node.nvml.write()  # the driver has let it go too
    wait_until(lambda: series(scrape(exporter).text, "pod_gpu_exporter_unattributed_processes")
               == {f'UUID="{L4}",gpu="0"': "0"})


def test_without_nvml_the_mode_serves_nvml_up_0_until_the_driver_appears(node):
    node.add_pod("a")
    node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node.run_in(10, "a")
    exporter = node.start()  # no node file: the fake answers nvmlInit with DRIVER_NOT_LOADED
    text = wait_until(lambda: (t := scrape(exporter).text) and "pod_gpu_exporter_nvml_up 0" in t and t)
    assert "pod_gpu_container_memory_used_bytes" not in text
    assert 'pod="a"' in text and "pod_gpu_exporter_dcgm_up 1" in text  # dcgm samples still attributed
    node.nvml.gpu(0, L4).process(L4, 10, 64 * MIB).write()  # the GPU operator installs the driver
    text = shares_served(exporter)
    assert series(text, "pod_gpu_container_memory_used_bytes") == {holder_labels("a"): str(64 * MIB)}
    assert "pod_gpu_exporter_nvml_up 1" in text
    log = exporter.stderr_text()
    assert log.count("NVML unavailable") == 1 and "Driver Not Loaded" in log


def test_without_host_pids_or_the_api_no_share_is_guessed(node, tmp_path):
    node.add_pod("a")
    node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node.nvml.gpu(0, L4).process(L4, 10, 64 * MIB).write()
    node.run_in(10, "a")
    own_pids = ProcTree(tmp_path / "own-pid-namespace").host_process(1, "0::/\n")  # what a pod without hostPID sees
    no_host_pids = node.start(extra=["--sharing.proc-root", str(own_pids.root)])
    no_api = node.start(api=False)
    for exporter, why in ((no_host_pids, "hostPID"), (no_api, "need the Kubernetes API")):
        wait_until(lambda: why in exporter.stderr_text())
        text = scrape(exporter).text
        assert "pod_gpu_exporter_nvml_up 1" in text and "pod_gpu_container_memory_used_bytes" not in text
        assert 'pod="a"' in text  # dcgm samples unaffected
    assert no_host_pids.stderr_text().count("hostPID") == 1  # said once, not per refresh
    assert no_api.stderr_text().count("need the Kubernetes API") == 1


DOC = Path(__file__).resolve().parents[1] / "docs" / "process-shares.md"


def doc_queries() -> List[str]:
    """The PromQL expressions of the doc's promql block, one per comment-headed paragraph."""
    block = re.search(r"```promql\n(.*?)```", DOC.read_text(), re.DOTALL).group(1)
    queries = []
    for paragraph in block.split("\n\n"):
        expression = "\n".join(line for line in paragraph.splitlines() if not line.startswith("#")).strip()
        if expression:
            queries.append(expression)
    return queries


def test_every_series_of_the_mode_is_documented(node):
    node.add_pod("a")
    node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node.nvml.gpu(0, L4).process(L4, 10, MIB).sample(L4, 10, 5).write()
    node.run_in(10, "a")
    text = shares_served(node.start())
    served = set(re.findall(r"^# TYPE (pod_gpu_\w+) ", text, re.MULTILINE))
    documented = DOC.read_text()
    assert set(SHARE_FAMILIES) <= served
    assert not sorted(name for name in SHARE_FAMILIES if f"`{name}`" not in documented)


def test_the_docs_queries_pass_promtool(tmp_path):
    import shutil
    import subprocess

    import yaml

    queries = doc_queries()
    assert len(queries) >= 5 and "sum by (namespace)" in queries[0]
    promtool = shutil.which("promtool")
    if promtool is None:
        from deploy_tools import missing_tool

        missing_tool("promtool", "apt-get install prometheus (.ci/run does)")
    rules = {"groups": [{"name": "doc", "rules": [{"record": f"doc:query{n}", "expr": q} for n, q in enumerate(queries)]}]}
    path = tmp_path / "doc-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_real_prometheus_answers_the_docs_namespace_queries(node, tmp_path):
    from deploy_tools import require_executable
    from test_prometheus_e2e import _eventually, _Prometheus

    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/run does)")
    whole, shared = "GPU-9e5b8fec-61bf-5124-a0a9-079af1b65cc6", "GPU-5022ce43-b44a-987b-71c3-dee05378a618"  # A800 GPUs 1, 2
    for name, namespace in (("solo", "team-a"), ("left", "team-a"), ("right", "team-b")):
        node.add_pod(name, namespace=namespace)
    node.kubelet.set_devices([AllocatedDevice("team-a", "solo", "main", "nvidia.com/gpu", whole),
                              AllocatedDevice("team-a", "left", "main", "nvidia.com/gpu", f"{shared}::0"),
                              AllocatedDevice("team-b", "right", "main", "nvidia.com/gpu", f"{shared}::1")])
    node.nvml.gpu(0, A800_GPU0).gpu(1, whole).gpu(2, shared)  # NVML indices are contiguous
    node.nvml.process(whole, 10, 5000 * MIB).process(shared, 20, 1000 * MIB).process(shared, 30, 3000 * MIB).write()
    for pid, pod in ((10, "solo"), (20, "left"), (30, "right")):
        node.run_in(pid, pod)
    exporter = node.start(A800_FIXTURE)
    shares_served(exporter, count=3)
    prometheus = _Prometheus(binary, tmp_path, {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "gpu", "metrics_path": "/gpu/metrics", "honor_labels": True,
                            "static_configs": [{"targets": [exporter.address]}]}]})
    try:
        shared_only, everything = doc_queries()[:2]

        def by_namespace(query):
            result = prometheus.query(query)
            return {s["metric"]["namespace"]: float(s["value"][1]) for s in result} if len(result) == 2 else None

        assert _eventually(lambda: by_namespace(shared_only), "memory per namespace on shared GPUs") == {
            "team-a": 1000 * MIB, "team-b": 3000 * MIB}  # the whole GPU held by team-a's solo pod is left out
        assert by_namespace(everything) == {"team-a": 6000 * MIB, "team-b": 3000 * MIB}
    finally:
        prometheus.stop()


def test_share_series_carry_the_apis_extra_labels_like_allocation_info(node):
    pod = node.add_pod("a")
    node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", L4)])
    node.nvml.gpu(0, L4).process(L4, 10, MIB).sample(L4, 10, 40).write()
    node.run_in(10, "a")
    exporter = node.start(extra=["--labels.extra", "pod_uid"])
    uid = pod["metadata"]["uid"]
    want = holder_labels("a") + f',pod_uid="{uid}"'

    def with_extras():
        text = scrape(exporter).text
        return text if want in series(text, "pod_gpu_container_memory_used_bytes") else None

    text = wait_until(with_extras)
    assert series(text, "pod_gpu_container_sm_utilization_ratio") == {want: "0.4"}
    info = series(text, "pod_gpu_allocation_info")
    assert any(f'container="main",pod_uid="{uid}"' in labels for labels in info), info  # after the owner labels, as here
