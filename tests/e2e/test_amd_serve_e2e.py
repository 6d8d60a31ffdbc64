"""An AMD node served with --gpu.vendor amd: the real exporter, a fake kubelet, AMD's identity service and exporter, and
a sysfs tree as AMD's code reads it; every sample goes to its GPU's or partition's holder and to no one else."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.amd.demo_exporter import SimulatedAmdExporter
from exporter.vendors.amd.demo_node import CPX_GPU, HOLDERS, NIC_ADDRESS, NIC_RESOURCE, allocations, identity_states
from exporter.vendors.amd.demo_sysfs import mi300x_node
from exporter.vendors.amd.dialect import DEVICE_WIDE_FAMILIES, unprefixed
from support.amd_node import AmdNode, amd_slice, hold_through_claim, holder, samples
from support.exporter_process import exporter_command, exporter_env
from support.fake_kube_api import write_kubeconfig
from support.kube_e2e import gauge
from support.kube_scenario import NODE
from support.waiting import wait_until

STALE_POD = "llm-server-old-5d8f"  # AMD's exporter still names it on GPU 2 (demo_node.amd_own_holder)
AMD_OWN = {"pod_uuid", "job_id", "job_user", "job_partition"}


@pytest.fixture
def node(amd_node):
    return amd_node  # conftest's maker of AMD nodes


def scrape(node: AmdNode) -> str:
    response = requests.get(node.exporter.url(), timeout=10)
    response.raise_for_status()
    return response.text


def expected_holder(name: str, labels: dict):
    """Whose a served AMD sample is: its gpu_id's holder, none for a partitioned GPU's whole-GPU figure."""
    if unprefixed(name) in DEVICE_WIDE_FAMILIES and labels["gpu_compute_partition_type"] == "cpx":
        return None
    return HOLDERS.get(labels["gpu_id"])


def gpu_samples(text: str):
    return [(name, labels) for name, labels, _ in samples(text) if "gpu_id" in labels
            and not name.startswith("pod_gpu_")]


def attributed(node: AmdNode, pod: str = HOLDERS["0"][1]) -> str:
    """The answer once a GPU sample (not only an allocation row) names `pod`, else ""."""
    text = scrape(node)
    return text if any(labels.get("pod") == pod for _, labels in gpu_samples(text)) else ""


def assert_attributed(text: str) -> None:
    served = gpu_samples(text)
    assert len({labels["gpu_id"] for _, labels in served}) == 15  # 7 whole GPUs, 8 partitions
    wrong = [(name, labels["gpu_id"], holder(labels)) for name, labels in served
             if holder(labels) != expected_holder(name, labels)]
    assert not wrong, wrong[:5]
    assert not [labels for _, labels in served if AMD_OWN & set(labels)]
    assert STALE_POD not in text


def _mixed_names(separator: str):
    """The demo's devices, with GPU 0 under `single` naming by its address in upper case and the CPX GPU's
    partition folders spelled with `separator`; the NIC stays."""
    devices = []
    for device in allocations():
        if device.device_id == "0000:05:00.0":
            device = dataclasses.replace(device, resource="amd.com/gpu", device_id="0000:05:00.0".upper())
        elif device.device_id.startswith("amdgpu_xcp"):
            device = dataclasses.replace(device, device_id=device.device_id.replace("_", separator, 2)
                                         .replace("amdgpu" + separator, "amdgpu_"))
        devices.append(device)
    return devices


@pytest.mark.parametrize("prefix, separator", [("", "_"), ("amd_", ".")])
def test_every_sample_goes_to_its_gpus_holder_and_to_no_other(node, prefix, separator):
    specs = mi300x_node(cpx_gpus=(CPX_GPU,))
    specs[CPX_GPU] = dataclasses.replace(specs[CPX_GPU], xcp_separator=separator)
    amd = node(specs=specs)
    amd.amd.body = SimulatedAmdExporter(prefix=prefix, clock=lambda: 0.0).render
    devices = _mixed_names(separator)
    assert any(d.device_id == "amdgpu_xcp.49" for d in devices) == (separator == ".")
    # A form AMD's plugins do not write: counted unresolved, never guessed.
    amd.hold(devices + [AllocatedDevice("odd", "odd-pod", "main", "amd.com/gpu", "card3")])
    amd.serve()
    text = wait_until(lambda: attributed(amd), 10)
    assert_attributed(text)
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "1"
    assert gauge(text, "pod_gpu_exporter_upstream_up") == "1"
    assert gauge(text, "pod_gpu_exporter_amd_identity_up") == "1"
    assert 'pod_gpu_exporter_vendor_info{vendor="amd"} 1' in text
    # The CPX GPU's activity is its whole GPU's, served on partition 0, which embed-0 holds: no holder's.
    activity = [labels for name, labels in gpu_samples(text) if unprefixed(name) == "gpu_gfx_activity"
                and labels["gpu_id"] == "7"]
    assert activity and all(holder(labels) is None for labels in activity)
    # Our rows name each device as AMD's samples do; the NIC is no GPU: no row, not unresolved.
    rows = [labels for name, labels, _ in samples(text) if name == "pod_gpu_allocation_info"]
    assert NIC_ADDRESS not in text and NIC_RESOURCE not in text
    assert [row for row in rows if row["pod"] == "odd-pod"] == [
        {"namespace": "odd", "pod": "odd-pod", "container": "main", "resource": "amd.com/gpu", "device_id": "card3"}]
    rows = [row for row in rows if row["pod"] != "odd-pod"]
    assert len(rows) == len(HOLDERS)
    for row in rows:
        assert HOLDERS[row["gpu_id"]] == holder(row)
        assert row["gpu_uuid"] == amd.gpu(row["gpu_id"]).uuid
        assert row["gpu_partition_id"] == amd.gpu(row["gpu_id"]).partition_id


def test_dra_devices_attribute_their_gpu_and_partitions(node):
    amd = node()
    whole, cpx = mi300x_node(cpx_gpus=(CPX_GPU,))[0], mi300x_node(cpx_gpus=(CPX_GPU,))[CPX_GPU]

    def dra(pod: str, card: int, render: int) -> AllocatedDevice:
        return AllocatedDevice("dra", pod, "main", "gpu.amd.com", f"gpu-{card}-{render}", dra=True,
                               claim=f"dra/{pod}-gpu", pool="demo-node")
    # GPU 0 whole; partitions 0 and 3 of the CPX GPU (gpu_id 7 and 10).
    amd.hold([dra("whole", whole.card, whole.render), dra("part-0", cpx.card, cpx.render),
              dra("part-3", cpx.card + 3, cpx.render + 3)])
    amd.serve()
    text = wait_until(lambda: attributed(amd, "part-3"), 10)
    holders = {"0": ("dra", "whole", "main"), "7": ("dra", "part-0", "main"), "10": ("dra", "part-3", "main")}
    wrong = [(name, labels["gpu_id"], holder(labels)) for name, labels in gpu_samples(text)
             if holder(labels) != (None if expected_holder(name, labels) is None else holders.get(labels["gpu_id"]))]
    assert not wrong, wrong[:5]
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"


def test_health_follows_the_identity_service_per_holder(node):
    amd = node()
    amd.hold(allocations())
    amd.serve()
    row = 'pod_gpu_device_health_status{gpu_id="5",gpu_partition_id="0",gpu_uuid="%s",status="%s"} 1'
    uuid = amd.gpu("5").uuid
    wait_until(lambda: row % (uuid, "healthy") in scrape(amd), 10)
    amd.identity.set_states(identity_states(1000.0))  # GPU 5 turns unhealthy
    wait_until(lambda: row % (uuid, "unhealthy") in scrape(amd), 3)


def test_with_the_kubernetes_api_dra_devices_are_met_and_health_combines_the_pods_status(node, api, tmp_path):
    amd = node()
    whole, cpx = mi300x_node(cpx_gpus=(CPX_GPU,))[0], mi300x_node(cpx_gpus=(CPX_GPU,))[CPX_GPU]
    names = {"whole": f"gpu-{whole.card}-{whole.render}", "part-3": f"gpu-{cpx.card + 3}-{cpx.render + 3}"}
    api.put("resource.k8s.io/v1", "resourceslices", amd_slice({
        names["whole"]: {"pciAddr": whole.address, "type": "amdgpu"},
        names["part-3"]: {"parentPciAddr": cpx.address, "type": "amdgpu-partition"}}))
    devices = [hold_through_claim(api, pod, name, "Unhealthy" if pod == "part-3" else "Healthy")
               for pod, name in names.items()]
    amd.hold(devices)
    amd.serve(kubeconfig=write_kubeconfig(str(tmp_path / "kubeconfig"), api.url), node_name=NODE)
    text = wait_until(lambda: attributed(amd, "part-3"), 15)
    holders = {"0": ("dra", "whole", "main"), "10": ("dra", "part-3", "main")}
    wrong = [(name, labels["gpu_id"], holder(labels)) for name, labels in gpu_samples(text)
             if holder(labels) != (None if expected_holder(name, labels) is None else holders.get(labels["gpu_id"]))]
    assert not wrong, wrong[:5]
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "0"
    # The identity service says both are healthy; the pod's status says partition 3 is not: unhealthy wins.
    health = {labels["gpu_id"]: labels["status"] for name, labels, _ in samples(text)
              if name == "pod_gpu_device_health_status"}
    assert health == {"0": "healthy", "10": "unhealthy"}
    assert gauge(text, "pod_gpu_exporter_kubernetes_api_up") == "1"


def _warnings(amd: AmdNode):
    return [line for line in amd.exporter.stderr_text().splitlines()
            if "dependency=amd-identity-service" in line and "level=warn" in line]


def _log_warnings(amd: AmdNode):
    """Every warning or error line the exporter logged, whatever it is about."""
    return [line for line in amd.exporter.stderr_text().splitlines() if "level=warn" in line or "level=error" in line]


@pytest.mark.parametrize("fault", ["absent", "hang", "internal", "garbage", "not_ready"])
def test_without_the_identity_service_samples_are_served_unattributed_until_it_answers(node, fault):
    amd = node(identity=fault != "not_ready")
    if fault == "absent":
        amd.identity.stop()
    elif fault != "not_ready":
        amd.identity.fault = fault
    amd.hold(allocations())
    amd.serve("--amd.timeout", "1s")
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_amd_identity_up") == "0"
                               and len(_warnings(amd)) == 1 and "gpu_gfx_activity{" in t else "")(scrape(amd)), 10)
    served = gpu_samples(text)
    assert len({labels["gpu_id"] for _, labels in served}) == 15  # every sample still served
    assert not [labels for _, labels in served if holder(labels)]  # nothing attributed, AMD's own removed
    assert gauge(text, "pod_gpu_exporter_upstream_up") == "1"
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == str(len(HOLDERS))
    lists = amd.identity.list_calls
    wait_until(lambda: amd.identity.list_calls >= lists + 2 or fault == "absent", 10)  # refreshes went on
    assert len(_warnings(amd)) == 1, _warnings(amd)  # one line for the whole outage
    # and no other: the devices waiting on it are counted unresolved above, not warned about again
    assert _log_warnings(amd) == _warnings(amd)
    # Back up: attributed again within one identity refresh (500 ms; after a List still hanging, its 1 s timeout):
    # a new answer builds the mapping at once, not at the kubelet refresher's next turn.
    if fault == "absent":
        amd.identity.start()
    amd.identity.fault = None
    amd.identity.set_states(identity_states(0))
    text = wait_until(lambda: attributed(amd), 2.5)
    assert_attributed(text)
    assert gauge(text, "pod_gpu_exporter_amd_identity_up") == "1"
    assert len(_warnings(amd)) == 1
    assert _log_warnings(amd) == _warnings(amd)


def test_a_device_form_amd_does_not_write_is_warned_about_on_its_own_while_the_identity_service_is_down(node):
    amd = node()
    amd.identity.stop()
    amd.hold(allocations() + [AllocatedDevice("odd", "odd-pod", "main", "amd.com/gpu", "card3")])
    amd.serve("--amd.timeout", "1s")
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_amd_identity_up") == "0"
                               and len(_log_warnings(amd)) == 2 else "")(scrape(amd)), 10)
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == str(len(HOLDERS) + 1)
    lists = amd.kubelet.list_calls
    wait_until(lambda: amd.kubelet.list_calls >= lists + 3, 10)  # mappings went on being built
    outage, unknown = sorted(_log_warnings(amd), key=lambda line: "dependency=amd-identity-service" not in line)
    assert "dependency=amd-identity-service" in outage
    assert "cannot be matched" in unknown and unknown.endswith("device_ids=card3")  # it alone, not those waiting
    # Back up: attributed within one refresh, and nothing more is logged at warning level.
    amd.identity.start()
    text = wait_until(lambda: attributed(amd), 2.5)
    assert gauge(text, "pod_gpu_exporter_unresolved_devices") == "1"
    assert len(_log_warnings(amd)) == 2, _log_warnings(amd)


@pytest.mark.parametrize("flag, value", [("--sharing.mode", "process"), ("--health.xid-events", "on")])
def test_nvml_features_are_refused_on_an_amd_node_with_one_line(flag, value):
    done = subprocess.run(exporter_command() + ["serve", "--gpu.vendor", "amd", flag, value],
                          env=exporter_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"{flag} {value}:" in done.stderr
    assert "Traceback" not in done.stderr


def test_join_mode_names_holders_on_the_allocation_rows_only(node):
    amd = node()
    amd.hold(allocations())
    amd.serve("--labels.mode", "join")
    text = wait_until(lambda: (lambda t: t if gauge(t, "pod_gpu_exporter_amd_identity_up") == "1"
                               and 'gpu_id="7"' in t and "pod_gpu_allocation_info{" in t else "")(scrape(amd)), 10)
    assert not [labels for _, labels in gpu_samples(text) if holder(labels) or AMD_OWN & set(labels)]
    rows = {labels["gpu_id"]: holder(labels) for name, labels, _ in samples(text) if name == "pod_gpu_allocation_info"}
    assert rows == HOLDERS


def test_mapping_names_each_amd_device_by_its_gpu_id(node):
    amd = node()
    devices = allocations()
    amd.hold(devices)
    done = subprocess.run(exporter_command() + [
        "mapping", "--gpu.vendor", "amd", "--kubelet.socket", amd.kubelet.socket_path, "--amd.metrics-socket",
        amd.identity_socket, "--amd.sysfs-root", str(amd.sysfs), "--kubernetes.api", "off", "-o", "json"],
        env=exporter_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    matches = {row["device_id"]: row["matches"] for row in json.loads(done.stdout)["allocations"]}
    expected = {device.device_id: f'gpu_id="{gpu.gpu_id}"' for device in devices for gpu in amd.gpus
                if gpu.device_id == device.device_id and device.resource != NIC_RESOURCE}
    assert matches == expected


def test_hpc_job_rows_name_each_device_by_the_amd_samples_labels(node, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "3").write_text("slurm-42\n")  # files named by the gpu_id, a whole GPU's and a partition's
    (jobs / "10").write_text("slurm-7\nslurm-8\n")
    amd = node()
    amd.hold(allocations())
    amd.serve("--hpc.job-mapping-dir", str(jobs))
    text = wait_until(lambda: (lambda t: t if 'hpc_job="slurm-8"' in t else "")(scrape(amd)), 10)
    rows = sorted((labels for name, labels, _ in samples(text) if name == "pod_gpu_hpc_job_info"),
                  key=lambda labels: labels["hpc_job"])

    def row(gpu_id: str, job: str) -> dict:
        gpu = amd.gpu(gpu_id)
        return {"gpu_id": gpu_id, "gpu_partition_id": gpu.partition_id, "gpu_uuid": gpu.uuid, "hpc_job": job}
    assert rows == [row("3", "slurm-42"), row("10", "slurm-7"), row("10", "slurm-8")]
