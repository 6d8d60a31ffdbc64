"""Device health and DRA taints with the real exporter process and the fake Kubernetes API: the holders' pod
status (allocatedResourcesStatus) for device-plugin devices in each ID form and for DRA devices (by CDI ID and
by driver/pool/device), taints from ResourceSlices in v1 and v1beta1, and GpuWorkloadOnUnhealthyGpu run by
promtool on what the exporter served."""

from __future__ import annotations

import pytest
import yaml

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import PROMETHEUS_DIR
from support.fake_kube_api import FakeKubeApi, make_pod
from support.kube_e2e import scrape, start
from support.kube_scenario import NODE, POOL, UUID0, UUID1, UUID3
from support.promtool_tests import input_series, run_rule_test
from support.scrape_checks import sample_lines, split_sample
from support.waiting import wait_until

RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.yml"
UUID4 = "GPU-c4c7f4f8-af86-6966-c0b2-7c1e40c18347"  # gpu="4" in the H100 scrape
UUID6 = "GPU-f70b214f-9fe8-5a4e-0499-0ff9572959ff"  # gpu="6": tainted, held by nobody
UUID3_INDEX = "GPU-81d888ca-dd11-328c-45fa-d6807a1afa6a"  # gpu="3", held by its index "3"
UUID5 = "GPU-7845680c-0e07-1670-c2bb-9f018cd7864b"  # gpu="5", held by its index "5"
CDI_A = "k8s.gpu.nvidia.com/claim=train-gpu-gpu-h100-a"  # what the fake kubelet reports for that device

DEVICES = [
    AllocatedDevice("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0"),
    AllocatedDevice("web", "infer-1", "vllm", "nvidia.com/gpu.shared", UUID1 + "::0"),
    AllocatedDevice("web", "infer-2", "vllm", "nvidia.com/gpu.shared", UUID1 + "::1"),
    AllocatedDevice("web", "idx", "main", "nvidia.com/gpu", "3"),
    AllocatedDevice("web", "quiet", "main", "nvidia.com/gpu", "5"),  # its pod status reports no health
    AllocatedDevice("batch", "train-x7k2p", "main", "gpu.nvidia.com", "gpu-h100-a", dra=True,
                    claim="batch/train-gpu", pool=POOL),
    AllocatedDevice("batch", "eval", "main", "gpu.nvidia.com", "gpu-h100-b", dra=True, claim="batch/eval-gpu",
                    pool=POOL),
]
# (namespace, pod, container) → its allocatedResourcesStatus, as the kubelet writes it.
STATUS = {
    ("ml", "small-a", "c"): [("nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0", "Healthy")],
    ("web", "infer-1", "vllm"): [("nvidia.com/gpu.shared", UUID1 + "::0", "Healthy"),
                                 ("nvidia.com/gpu", "6", "Unhealthy")],  # not a device it holds: ignored
    ("web", "infer-2", "vllm"): [("nvidia.com/gpu.shared", UUID1 + "::1", "Unhealthy")],
    ("web", "idx", "main"): [("nvidia.com/gpu", "3", "Healthy")],
    ("web", "quiet", "main"): [],
    ("batch", "train-x7k2p", "main"): [("claim:train-gpu/gpu", CDI_A, "Unknown")],
    ("batch", "eval", "main"): [("claim:eval-gpu/gpu", f"gpu.nvidia.com/{POOL}/gpu-h100-b", "Unhealthy")],
}
TAINTS = {
    "gpu-h100-a": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}],
    "gpu-h100-b": [{"key": "gpu.nvidia.com/unmonitored", "effect": "None"},
                   {"key": "example.com/drain", "value": "soon", "effect": "Evict"}],
    "gpu-h100-c": [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}],
}
SLICE_UUIDS = {"gpu-h100-a": UUID3, "gpu-h100-b": UUID4, "gpu-h100-c": UUID6}

EXPECTED_HEALTH = {
    f'UUID="{UUID0}",gpu="0",GPU_I_ID="11",status="healthy"',
    f'UUID="{UUID1}",gpu="1",status="unhealthy"',  # two holders disagree: unhealthy wins
    f'UUID="{UUID3_INDEX}",gpu="3",status="healthy"',
    f'UUID="{UUID3}",gpu="2",status="unknown"',
    f'UUID="{UUID4}",gpu="4",status="unhealthy"',
    f'UUID="{UUID5}",gpu="5",status="unknown"',  # its holder's pod status says nothing of it
}
EXPECTED_TAINTS = {
    f'UUID="{UUID3}",gpu="2",key="gpu.nvidia.com/xid",value="79",effect="NoSchedule"',
    f'UUID="{UUID4}",gpu="4",key="example.com/drain",value="soon",effect="None"',  # "Evict": unknown
    f'UUID="{UUID4}",gpu="4",key="gpu.nvidia.com/unmonitored",value="",effect="None"',
    f'UUID="{UUID6}",gpu="6",key="gpu.nvidia.com/gpu-lost",value="",effect="NoSchedule"',
}


@pytest.fixture(params=["v1", "v1beta1"])
def api(request):
    """The API server, serving DRA in one version only: v1 (Kubernetes 1.34+) or v1beta1 (1.32-1.33)."""
    fake = FakeKubeApi(served_versions=("v1", "apps/v1", "batch/v1", f"resource.k8s.io/{request.param}")).start()
    fake.dra_version = request.param
    yield fake
    fake.stop()


def _resource_slice(version: str) -> dict:
    devices = []
    for name, uuid in SLICE_UUIDS.items():
        fields = {"attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid}}, "taints": TAINTS[name]}
        devices.append({"name": name, **({"basic": fields} if version == "v1beta1" else fields)})
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice",
            "metadata": {"name": f"{NODE}-gpu.nvidia.com-abcde"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": NODE, "devices": devices,
                     "pool": {"name": POOL, "generation": 1, "resourceSliceCount": 1}}}


def _health_node(api, kubelet) -> None:
    version = f"resource.k8s.io/{api.dra_version}"
    api.put(version, "resourceslices", _resource_slice(api.dra_version))
    for namespace, claim, device in (("batch", "train-gpu", "gpu-h100-a"), ("batch", "eval-gpu", "gpu-h100-b")):
        result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": POOL, "device": device}
        api.put(version, "resourceclaims", {
            "apiVersion": version, "kind": "ResourceClaim", "metadata": {"name": claim, "namespace": namespace},
            "spec": {"devices": {"requests": []}}, "status": {"allocation": {"devices": {"results": [result]}}}})
    for (namespace, pod_name, container), entries in STATUS.items():
        pod = make_pod(namespace, pod_name, NODE, containers=(container,))
        by_name = {}
        for name, resource_id, health in entries:
            by_name.setdefault(name, []).append({"resourceID": resource_id, "health": health})
        if by_name:
            pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
                {"name": name, "resources": resources} for name, resources in by_name.items()]
        api.put("v1", "pods", pod)
    kubelet.set_devices(DEVICES)


def _labels(text: str, family: str) -> set:
    return {split_sample(line)[1] for line in sample_lines(text) if line.startswith(family + "{")}


def _served(exporter) -> str:
    def complete():
        text = scrape(exporter)
        done = (_labels(text, "pod_gpu_device_health_status") == EXPECTED_HEALTH
                and _labels(text, "pod_gpu_device_taint") == EXPECTED_TAINTS)
        return text if done else None

    return wait_until(complete, timeout_seconds=30)


def test_health_from_pod_status_and_taints_from_slices(node, api, run_exporter):
    kubelet = node[0]
    _health_node(api, kubelet)
    exporter = start(run_exporter, node)
    text = _served(exporter)  # every device and taint as expected, none more (waits until then, else fails)
    for family in ("pod_gpu_device_health_status", "pod_gpu_device_taint"):
        assert text.count(f"# TYPE {family} gauge") == 1
        assert all(line.endswith("} 1") for line in sample_lines(text) if line.startswith(family + "{"))
    # A pod status that turns healthy is served at the next mapping refresh.
    pod = make_pod("web", "infer-2", NODE, containers=("vllm",))
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu.shared", "resources": [{"resourceID": UUID1 + "::1", "health": "Healthy"}]}]
    api.put("v1", "pods", pod)
    wait_until(lambda: f'UUID="{UUID1}",gpu="1",status="healthy"' in _labels(scrape(exporter),
                                                                           "pod_gpu_device_health_status"))


def _alert(namespace, pod, container, uuid, gpu, reason):
    return {"exp_labels": {"severity": "critical", "instance": "node-a:9400", "namespace": namespace, "pod": pod,
                           "container": container, "workload_kind": "Pod", "workload": pod, "UUID": uuid,
                           "gpu": gpu, "reason": reason}}


@pytest.mark.parametrize("api", ["v1"], indirect=True)  # the slices' version is the test above's concern
def test_gpu_workload_on_unhealthy_gpu_alert_on_what_the_exporter_served(node, api, run_exporter, tmp_path):
    kubelet = node[0]
    _health_node(api, kubelet)
    exporter = start(run_exporter, node, "--labels.extra", "workload")
    text = _served(exporter)
    expected = [  # unhealthy or tainted NoSchedule/NoExecute; None and Evict taints, healthy and unknown do not count
        _alert("web", "infer-1", "vllm", UUID1, "1", "unhealthy"),
        _alert("web", "infer-2", "vllm", UUID1, "1", "unhealthy"),
        _alert("batch", "train-x7k2p", "main", UUID3, "2", "tainted"),
        _alert("batch", "eval", "main", UUID4, "4", "unhealthy"),
    ]
    _assert_alerts(text, expected, tmp_path)


def _assert_alerts(text: str, expected: list, tmp_path) -> None:
    """promtool runs GpuWorkloadOnUnhealthyGpu on the scrape `text` and finds exactly `expected` firing."""
    # The shipped rule without its annotations (promtool would compare them too): this test is of the expression.
    rules = yaml.safe_load(RULES.read_text())
    for rule in (r for group in rules["groups"] for r in group["rules"]):
        rule.pop("annotations", None)
    (tmp_path / RULES.name).write_text(yaml.safe_dump(rules))
    test = {"rule_files": [str(tmp_path / RULES.name)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series(text, 10), "alert_rule_test": [
                {"alertname": "GpuWorkloadOnUnhealthyGpu", "eval_time": "0m", "exp_alerts": []},  # pending (for: 1m)
                {"alertname": "GpuWorkloadOnUnhealthyGpu", "eval_time": "5m", "exp_alerts": expected}]}]}
    path = tmp_path / "health-rules.test.yml"
    result = run_rule_test(test, path)
    assert result.returncode == 0, result.stdout + result.stderr
    # The same check fails when one holder is left out: the expectation above is what it compares.
    test["tests"][0]["alert_rule_test"][1]["exp_alerts"] = expected[1:]
    result = run_rule_test(test, path)
    assert result.returncode != 0 and expected[0]["exp_labels"]["pod"] in result.stdout + result.stderr


@pytest.mark.parametrize("api", ["v1"], indirect=True)
def test_with_dcgm_exporter_down_each_device_keeps_one_name_and_the_alert_names_only_its_holders(
        node, api, run_exporter, tmp_path):
    """No sample carries any device: the allocation and health rows both name it as its device ID or slice
    does (UUID, or the index), so an unhealthy device held by its index names its holder and no other."""
    kubelet, dcgm, _ = node
    _health_node(api, kubelet)
    pod = make_pod("web", "idx", NODE, containers=("main",))
    pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "3", "health": "Unhealthy"}]}]
    api.put("v1", "pods", pod)
    exporter = start(run_exporter, node, "--labels.extra", "workload")
    wait_until(lambda: 'gpu="3",status="unhealthy"' in scrape(exporter), timeout_seconds=30)
    dcgm.stop()
    unsampled = {f'UUID="{UUID0}",GPU_I_ID="11",status="healthy"', f'UUID="{UUID1}",status="unhealthy"',
                 'gpu="3",status="unhealthy"', 'gpu="5",status="unknown"', f'UUID="{UUID3}",status="unknown"',
                 f'UUID="{UUID4}",status="unhealthy"'}
    text = wait_until(lambda: (lambda t: t if _labels(t, "pod_gpu_device_health_status") == unsampled else None)(
        scrape(exporter)), timeout_seconds=30)
    assert "pod_gpu_exporter_dcgm_up 0" in text and "DCGM_" not in text
    rows = {line.split("device_id=")[1] for line in sample_lines(text) if line.startswith("pod_gpu_allocation_info{")}
    assert {'"3",gpu="3"} 1', '"5",gpu="5"} 1', f'"{UUID1}::0",UUID="{UUID1}"}} 1'} <= rows
    expected = [
        _alert("web", "idx", "main", "", "3", "unhealthy"),
        _alert("web", "infer-1", "vllm", UUID1, "", "unhealthy"),
        _alert("web", "infer-2", "vllm", UUID1, "", "unhealthy"),
        _alert("batch", "train-x7k2p", "main", UUID3, "", "tainted"),
        _alert("batch", "eval", "main", UUID4, "", "unhealthy"),
    ]
    for alert in expected:  # a label the rows do not carry is absent from the alert, not empty
        alert["exp_labels"] = {name: value for name, value in alert["exp_labels"].items() if value}
    _assert_alerts(text, expected, tmp_path)


@pytest.mark.parametrize("api", ["v1"], indirect=True)  # the slices' version is the test above's concern
def test_without_the_api_neither_family_is_served_and_the_rest_is(node, api, run_exporter):
    kubelet, dcgm, _ = node
    _health_node(api, kubelet)
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--kubernetes.api",
                             "off", "--kubelet.refresh-interval", "200ms"])
    text = wait_until(lambda: (lambda t: t if t.count("pod_gpu_allocation_info{") == len(DEVICES) else None)(
        scrape(exporter)))
    for _ in range(3):  # several scrapes, several refreshes: nothing is logged for them
        text = scrape(exporter)
    assert "pod_gpu_device_health_status" not in text and "pod_gpu_device_taint" not in text
    assert any(line.startswith("DCGM_") and 'pod="infer-2"' in line for line in text.splitlines())
    assert "level=error" not in exporter.stderr_text() and "level=warn msg=\"Kubernetes" not in exporter.stderr_text()
