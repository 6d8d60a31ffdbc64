"""The families the real exporter serves are the catalogue's, mode by mode: the same names, types, HELP
text and labels, and none that the catalogue leaves out (dcgm-exporter's own families pass through)."""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Set, Tuple

from exporter.collectors.catalogue import CATALOGUE
from exporter.collectors.hpc_jobs.families import HPC_JOBS
from exporter.collectors.kubernetes.families import KUBERNETES_API
from exporter.exposition.families import OWNER, SELF, STANDARD_COLLECTOR_PREFIXES, TELEMETRY
from exporter.vendors.nvidia.families import PROCESS_MODE, XID_EVENTS
from exporter.sources.kubelet import AllocatedDevice
from support.fixtures import fixture_bytes
from support.scrape_checks import FAST_REFRESH, L4, L4_UUID, scrape
from support.shared_node import L4 as NODE_L4
from support.shared_node import L4_FIXTURE, MIB, shares_served
from support.waiting import wait_until

LOST_GPU = "GPU-0b0b0b0b-1111-4222-8333-000000000001"
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
_HELP = re.compile(r"^# HELP (\S+) (.*)$", re.MULTILINE)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$", re.MULTILINE)
_LABEL_NAME = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def families_in(text: str) -> Dict[str, Tuple[str, str]]:
    """name → (type, HELP text) of every family a scrape declares."""
    helps = dict(_HELP.findall(text))
    return {name: (kind, helps.get(name, "")) for name, kind in _TYPE.findall(text)}


def label_names(text: str) -> Dict[str, Set[FrozenSet[str]]]:
    """name → the distinct sets of label names its samples carry."""
    found: Dict[str, Set[FrozenSet[str]]] = {}
    for name, labels in _SAMPLE.findall(text):
        found.setdefault(name, set()).add(frozenset(_LABEL_NAME.findall(labels)))
    return found


def assert_served_as_catalogued(text: str, endpoint: str, modes: FrozenSet[str], upstream: str = "") -> None:
    """What one endpoint serves, less upstream's families and prometheus_client's standard collectors,
    is exactly the catalogue's families of that endpoint and those modes, each with its header and labels."""
    upstream_names = set(families_in(upstream))
    served = {name: declared for name, declared in families_in(text).items()
              if name not in upstream_names and not name.startswith(STANDARD_COLLECTOR_PREFIXES)}
    expected = {family.name: family for family in CATALOGUE if family.endpoint == endpoint and family.modes <= modes}
    assert sorted(served) == sorted(expected)
    samples = label_names(text)
    for name, family in expected.items():
        assert served[name] == (family.type, family.help), name
        assert family.header in text, name
        assert samples.get(name), f"{name} has no sample"
        for names in samples[name]:
            assert set(family.labels) <= names <= set(family.labels + family.optional_labels), (name, sorted(names))


def _report_health_and_a_taint(gpu_node, pod: dict) -> None:
    """The pod's status reports its GPU's health, and the node's ResourceSlice taints that GPU."""
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": NODE_L4, "health": "Healthy"}]}]
    gpu_node.api.put("v1", "pods", pod)
    gpu_node.api.put("resource.k8s.io/v1", "resourceslices", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "gpu-node-1-gpus"},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": "gpu-node-1", "pool": {"name": "gpu-node-1", "generation": 1,
                 "resourceSliceCount": 1}, "devices": [{"name": "gpu-0", "attributes": {
                     "type": {"string": "gpu"}, "uuid": {"string": NODE_L4}},
                     "taints": [{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}]}]}})


def test_process_mode_with_the_api_serves_every_family(gpu_node):
    _report_health_and_a_taint(gpu_node, gpu_node.add_pod("a"))
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", NODE_L4)])
    gpu_node.nvml.gpu(0, NODE_L4).energy(NODE_L4, 5000).process(NODE_L4, 10, MIB).sample(NODE_L4, 10, 5)
    gpu_node.add_pod("outsider")  # holds no GPU but runs on a's: the unallocated families
    gpu_node.nvml.process(NODE_L4, 20, MIB).sample(NODE_L4, 20, 5)
    # XID events are on in process mode: an XID on the held GPU, and a second GPU that NVML finds lost.
    gpu_node.nvml.gpu(1, LOST_GPU).fail("nvmlDeviceRegisterEvents", 15, LOST_GPU).write()
    gpu_node.run_in(10, "a")
    gpu_node.run_in(20, "outsider")
    exporter = gpu_node.start()
    shares_served(exporter)  # the mapping is in: the XID counts on its holder
    gpu_node.nvml.xid(NODE_L4, 79)
    shares_served(exporter, "pod_gpu_container_xid_errors_total")
    served = ("pod_gpu_device_lost{", "pod_gpu_device_taint{", "pod_gpu_unallocated_memory_used_bytes{")
    telemetry = wait_until(lambda: (lambda text: text if all(name in text for name in served) else None)(
        scrape(exporter).text))
    modes = frozenset({PROCESS_MODE, KUBERNETES_API, XID_EVENTS})
    assert_served_as_catalogued(telemetry, TELEMETRY, modes, fixture_bytes(L4_FIXTURE).decode())
    assert_served_as_catalogued(scrape(exporter, "/metrics").text, SELF, modes)


def test_device_mode_without_the_api_serves_the_families_of_every_mode(kubelet, dcgm, run_exporter):
    """--labels.mode join, so that between the two tests both label modes are seen."""
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--kubernetes.api",
                             "off", "--labels.mode", "join", *FAST_REFRESH])

    def allocations_listed():
        text = scrape(exporter).text
        return text if "pod_gpu_allocation_info{" in text else None

    telemetry = wait_until(allocations_listed)
    assert_served_as_catalogued(telemetry, TELEMETRY, frozenset(), fixture_bytes(L4).decode())
    assert_served_as_catalogued(scrape(exporter, "/metrics").text, SELF, frozenset())
    assert set(OWNER) <= {name for names in label_names(telemetry)["pod_gpu_allocation_info"] for name in names}


def test_hpc_job_mapping_serves_its_families(tmp_path, kubelet, dcgm, run_exporter):
    (tmp_path / "0").write_text("4242\n")  # the L4 fixture's one GPU
    (tmp_path / "1").write_text("x" * 300 + "\n")  # a line past the bound: one file skipped
    kubelet.set_devices([AllocatedDevice("hpc", "slurmd-0", "slurmd", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--kubernetes.api",
                             "off", "--hpc.job-mapping-dir", str(tmp_path), *FAST_REFRESH])

    def jobs_listed():
        text = scrape(exporter).text
        return text if "pod_gpu_hpc_job_info{" in text else None

    telemetry = wait_until(jobs_listed)
    assert_served_as_catalogued(telemetry, TELEMETRY, frozenset({HPC_JOBS}), fixture_bytes(L4).decode())
