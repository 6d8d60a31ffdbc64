"""OpenCost's own GPU queries, run by a real Prometheus against the real exporter on a simulated node.

The node holds GPUs every way a pod can: whole GPUs (one and two per container), time-slicing
replicas, MIG instances and a DRA claim. Each scrape configuration below is one users run; for each,
OpenCost's queries (copied verbatim, see OPENCOST_QUERIES) must give every pod what the node says.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import PODMONITOR, find_object, load_documents, require_executable
from support.exporter_process import start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kube_api import FakeKubeApi, write_kubeconfig
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes
from support.kube_e2e import add_pod
from support.kube_e2e import scrape as scrape_text
from support.kube_scenario import H100, NODE, POOL, UUID0, UUID1, UUID3, claim, resource_slice
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS, PrometheusServer
from support.waiting import wait_until

# OpenCost's query templates, verbatim (github.com/opencost/opencost, as read for this test):
# modules/prometheus-source/pkg/prom/metricsquerier.go, QueryGPUsUsageAvg, QueryGPUsUsageMax, QueryGPUInfo;
# modules/prometheus-source/pkg/prom/gpudevicequerier.go, queryGPUDeviceGauge with gpuDeviceByLabels.
QUERY_FMT_GPUS_USAGE_AVG = 'avg(avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{container!=""}[%s])) by (container, pod, namespace, uid, %s)'  # noqa: E501
QUERY_FMT_GPUS_USAGE_MAX = 'max(max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{container!=""}[%s])) by (container, pod, namespace, uid, %s)'  # noqa: E501
QUERY_FMT_GET_GPU_INFO = 'avg(avg_over_time(DCGM_FI_DEV_DEC_UTIL{container!="",%s}[%s])) by (container, pod, namespace, device, modelName, UUID, uid, %s)'  # noqa: E501
GPU_DEVICE_BY_LABELS = "device, modelName, UUID, GPU_I_PROFILE, GPU_I_ID"
QUERY_FMT_GPU_DEVICE_GAUGE = "%s(%s_over_time(%s{%s}[%s])) by (%s, %s)"
# OpenCost's defaults: PROM_CLUSTER_ID_LABEL is "cluster_id"; the cluster filter is empty.
CLUSTER_LABEL, CLUSTER_FILTER, WINDOW = "cluster_id", "", "1m"

UUID4, UUID5 = "GPU-c4c7f4f8-af86-6966-c0b2-7c1e40c18347", "GPU-7845680c-0e07-1670-c2bb-9f018cd7864b"
UUID2 = "GPU-81d888ca-dd11-328c-45fa-d6807a1afa6a"  # gpu="3" in the scrape
EXPORTER_POD = {"namespace": "gpu-monitoring", "pod": "pod-gpu-metrics-exporter-x7k2p", "container": "exporter"}
# (namespace, pod, container) → the (UUID, GPU_I_ID) devices it holds, as the kubelet and the DRA slice say
HOLDINGS = {
    ("ml", "trainer-0", "cuda"): [(UUID2, "")],
    ("ml", "multi-0", "cuda"): [(UUID4, ""), (UUID5, "")],
    ("web", "infer-1", "vllm"): [(UUID1, "")],
    ("web", "infer-2", "vllm"): [(UUID1, "")],
    ("ml", "small-a", "c"): [(UUID0, "11")],
    ("ml", "small-b", "c"): [(UUID0, "13")],
    ("batch", "train-x7k2p", "main"): [(UUID3, "")],
}
# kube-state-metrics' kube_pod_resourceclaim_info for the DRA pod, with the labels kube-state-metrics
# gives it (namespace, pod, uid, claim_name: the pod's own name for the claim, resourceclaim_name,
# resourceclaim_template_name); served by a second target, as kube-state-metrics would be.
KSM_BODY = ("# TYPE kube_pod_resourceclaim_info gauge\n"
            'kube_pod_resourceclaim_info{namespace="batch",pod="train-x7k2p",uid="%s",claim_name="gpu",'
            'resourceclaim_name="train-gpu",resourceclaim_template_name="train-gpu-template"} 1\n')
CLAIM_JOIN = ("pod_gpu_allocation_info * on (namespace, pod, resourceclaim_name) group_left (claim_name, "
              "resourceclaim_template_name) kube_pod_resourceclaim_info")
# GPU 1 is offered as 4 time-slicing replicas, 2 of them held: web holds half a GPU.
OFFERED = [("nvidia.com/gpu", f"{UUID1}::{index}") for index in range(4)] + [
    ("nvidia.com/gpu", uuid) for uuid in (UUID2, UUID4, UUID5)]
ALLOCATED_PER_NAMESPACE = {"ml": 1 + 2 + 1 / 8 + 1 / 8, "web": 0.5, "batch": 1.0}


def kubelet_devices():
    return [
        AllocatedDevice("ml", "trainer-0", "cuda", "nvidia.com/gpu", UUID2),
        AllocatedDevice("ml", "multi-0", "cuda", "nvidia.com/gpu", UUID4),
        AllocatedDevice("ml", "multi-0", "cuda", "nvidia.com/gpu", UUID5),
        AllocatedDevice("web", "infer-1", "vllm", "nvidia.com/gpu", UUID1 + "::0"),
        AllocatedDevice("web", "infer-2", "vllm", "nvidia.com/gpu", UUID1 + "::1"),
        AllocatedDevice("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0"),
        AllocatedDevice("ml", "small-b", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/13/0"),
        AllocatedDevice("batch", "train-x7k2p", "main", "gpu.nvidia.com", "gpu-h100-a", dra=True,
                        claim="batch/train-gpu", pool=POOL),
    ]


def upstream_body() -> tuple:
    """The real H100 scrape plus the two fields OpenCost reads, each device with values of its own; and
    (UUID, GPU_I_ID) → (engine active, decoder utilisation), what the node says."""
    lines, truth = [], {}
    for line in fixture_bytes(H100).decode().splitlines():
        match = re.match(r"^DCGM_FI_DEV_FB_USED(\{.*\}) \S+$", line)
        if not match:
            continue
        labels = match.group(1)
        gpu = int(re.search(r'gpu="(\d+)"', labels).group(1))
        instance = (re.search(r'GPU_I_ID="(\d+)"', labels) or [None, ""])[1]
        engine, decoder = round(0.05 + 0.1 * gpu + (0.02 if instance == "13" else 0.0), 3), 10 * gpu + len(instance)
        truth[(re.search(r'UUID="([^"]+)"', labels).group(1), instance)] = (engine, decoder)
        lines += [f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{labels} {engine}", f"DCGM_FI_DEV_DEC_UTIL{labels} {decoder}"]
    body = ("# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n"
            "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n"
            + "".join(line + "\n" for line in lines if line.startswith("DCGM_FI_PROF"))
            + "# HELP DCGM_FI_DEV_DEC_UTIL Decoder utilization (in %).\n# TYPE DCGM_FI_DEV_DEC_UTIL gauge\n"
            + "".join(line + "\n" for line in lines if line.startswith("DCGM_FI_DEV_DEC")))
    return fixture_bytes(H100) + body.encode(), truth


def podmonitor_scrape() -> dict:
    """prometheus/operator/podmonitor.yaml as the operator writes it into Prometheus' configuration:
    the scraped pod's namespace/pod/container as target labels, then the monitor's relabelings."""
    (endpoint,) = find_object(load_documents(PODMONITOR), "PodMonitor")["spec"]["podMetricsEndpoints"]
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    relabel = [{names.get(key, key): value for key, value in rule.items()} for rule in endpoint["relabelings"]]
    return {"honor_labels": endpoint["honorLabels"], "target_labels": EXPORTER_POD, "relabel_configs": relabel}


# The scrape configurations compared: the one docs/opencost.md gives; the shipped PodMonitor;
# honor_labels true behind target labels that name the exporter's own pod (what a ServiceMonitor
# or the usual kubernetes-pods job attaches); and honor_labels false with those target labels.
SCRAPES = {
    "recommended": {"honor_labels": True, "metric_relabel_configs": [
        {"source_labels": ["pod_uid"], "target_label": "uid"}]},
    "podmonitor": podmonitor_scrape(),
    "honor_true_exporter_pod_labels": {"honor_labels": True, "target_labels": EXPORTER_POD},
    "honor_false_exporter_pod_labels": {"honor_labels": False, "target_labels": EXPORTER_POD},
}


@pytest.fixture(scope="module", params=sorted(SCRAPES))
def stack(request):
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix="pgx-oc-", dir="/tmp"))  # short: unix socket paths are limited
    body, truth = upstream_body()
    started, uids = [], {}
    try:
        api = FakeKubeApi().start()
        started.append(api)
        api.put("resource.k8s.io/v1", "resourceslices", resource_slice({"gpu-h100-a": {"type": "gpu", "uuid": UUID3}}))
        api.put("resource.k8s.io/v1", "resourceclaims", claim("batch", "train-gpu", "gpu-h100-a"))
        for namespace, pod, container in HOLDINGS:
            uids[(namespace, pod)] = add_pod(api, namespace, pod, containers=(container,))["metadata"]["uid"]
        kubelet, dcgm = FakeKubelet(str(folder / "kubelet.sock")), FakeDcgmExporter(body)
        ksm = FakeDcgmExporter((KSM_BODY % uids[("batch", "train-x7k2p")]).encode())
        kubelet.set_devices(kubelet_devices())
        kubelet.set_allocatable(OFFERED)
        for part in (kubelet, dcgm, ksm):
            part.start()
            started.append(part)
        exporter = start_exporter([
            "--kubelet.socket", str(folder / "kubelet.sock"), "--dcgm.url", dcgm.url, "--kubelet.refresh-interval", "1s",
            "--kubernetes.kubeconfig", write_kubeconfig(str(folder / "kubeconfig"), api.url),
            "--kubernetes.node-name", NODE, "--labels.extra", "pod_uid"])
        started.append(exporter)
        # Prometheus starts once every holder is attributed with its pod_uid (the DRA slice and the pods
        # read): a query window holding the first, partial answers would mix two versions of one owner.
        wait_until(lambda: all(re.search(rf'(?m)^DCGM_FI_PROF[^\n]*pod="{pod}"[^\n]*pod_uid="{uids[(namespace, pod)]}"',
                                         text) for text in [scrape_text(exporter)] for namespace, pod, _ in HOLDINGS),
                   timeout_seconds=40, interval=0.5)
        scrape = dict(SCRAPES[request.param])
        target = {"targets": [urllib.parse.urlsplit(exporter.url()).netloc], "labels": scrape.pop("target_labels", {})}
        prometheus = PrometheusServer(binary, folder, {
            "global": {"scrape_interval": "1s"},
            "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", **scrape,
                                "static_configs": [target]},
                               {"job_name": "kube-state-metrics", "honor_labels": True,
                                "static_configs": [{"targets": [urllib.parse.urlsplit(ksm.url).netloc]}]}]})
        started.append(prometheus)
        yield request.param, prometheus, truth, uids
    finally:
        for part in reversed(started):
            part.stop()
        shutil.rmtree(folder, ignore_errors=True)


def opencost_query(prometheus, promql: str, settled):
    """The query's rows once every pod's samples (those settled() waits for) have arrived."""
    return wait_until(lambda: (lambda rows: rows if settled(rows) else None)(prometheus.query(promql)), DEADLINE_SECONDS, POLL_SECONDS, promql)


def owner_of(row) -> tuple:
    metric = row["metric"]
    return metric.get("namespace"), metric.get("pod"), metric.get("container")


def holders_of(device) -> int:
    return sum(device in devices for devices in HOLDINGS.values())


def expected_usage(truth, devices) -> float:
    return sum(truth[device][0] for device in devices) / len(devices)


def test_gpu_usage_per_pod_is_what_the_node_says(stack):
    name, prometheus, truth, uids = stack
    promql = QUERY_FMT_GPUS_USAGE_AVG % (WINDOW, CLUSTER_LABEL)
    rows = opencost_query(prometheus, promql, lambda rows: len(rows) >= (1 if "false" in name else len(HOLDINGS)))
    got = {owner_of(row): float(row["value"][1]) for row in rows}
    exporter_pod = tuple(EXPORTER_POD.values())
    if name == "honor_false_exporter_pod_labels":
        # Prometheus keeps its target labels and renames ours exported_namespace/exported_pod/
        # exported_container: OpenCost sees one pod, the exporter's own, using every GPU of the node.
        assert list(got) == [exporter_pod]
        # One series per device and holder (an unheld device has one): the average runs over those.
        series = [truth[key][0] for key in truth for _copy in range(max(1, holders_of(key)))]
        assert got[exporter_pod] == pytest.approx(sum(series) / len(series), abs=1e-9)
        raw = prometheus.query('count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{exported_pod="trainer-0"})')
        assert raw and raw[0]["value"][1] == "1"  # the owner is there, under a name OpenCost never reads
        return
    for owner, devices in HOLDINGS.items():
        assert got[owner] == pytest.approx(expected_usage(truth, devices), abs=1e-9), owner
    idle = [truth[key][0] for key in truth if not any(key in held for held in HOLDINGS.values())]
    if name == "honor_true_exporter_pod_labels":
        # Samples of GPUs nobody holds carry no owner labels, so Prometheus adds its target labels:
        # OpenCost books the idle GPUs' activity to the exporter's pod.
        assert set(got) == set(HOLDINGS) | {exporter_pod}
        assert got[exporter_pod] == pytest.approx(sum(idle) / len(idle), abs=1e-9)
    else:
        assert set(got) == set(HOLDINGS)
    if name == "recommended":
        assert {owner_of(row): row["metric"].get("uid") for row in rows} == {
            owner: uids[owner[:2]] for owner in HOLDINGS}  # the relabelled pod_uid keeps restarted pods apart


def test_gpu_usage_max_per_pod_is_what_the_node_says(stack):
    name, prometheus, truth, _uids = stack
    if name == "honor_false_exporter_pod_labels":
        pytest.skip("shown on the avg query: every row is the exporter's pod")
    promql = QUERY_FMT_GPUS_USAGE_MAX % (WINDOW, CLUSTER_LABEL)
    got = {owner_of(row): float(row["value"][1])
           for row in opencost_query(prometheus, promql, lambda rows: len(rows) >= len(HOLDINGS))}
    for owner, devices in HOLDINGS.items():
        assert got[owner] == pytest.approx(max(truth[device][0] for device in devices), abs=1e-9), owner


def test_gpu_info_names_each_pods_devices(stack):
    name, prometheus, truth, _uids = stack
    if name == "honor_false_exporter_pod_labels":
        pytest.skip("shown on the avg query: every row is the exporter's pod")
    promql = QUERY_FMT_GET_GPU_INFO % (CLUSTER_FILTER, WINDOW, CLUSTER_LABEL)
    want = {}
    for owner, devices in HOLDINGS.items():
        for uuid, instance in devices:
            # One row per device name: a pod's two MIG-less GPUs are two rows, its MIG instance one row
            # averaged over the instances of that GPU the pod holds (here, one).
            want[(*owner, uuid)] = float(truth[(uuid, instance)][1])
    rows = opencost_query(prometheus, promql, lambda rows: len(rows) >= len(want))
    got = {(*owner_of(row), row["metric"]["UUID"]): float(row["value"][1]) for row in rows
           if owner_of(row) in HOLDINGS}
    assert got == want
    assert all(row["metric"].get("modelName") == "NVIDIA H100 80GB HBM3" and row["metric"].get("device")
               for row in rows)


@pytest.mark.parametrize("agg", ["avg", "max"])
def test_device_level_usage_is_unchanged_by_the_owner_copies(stack, agg):
    _name, prometheus, truth, _uids = stack
    promql = QUERY_FMT_GPU_DEVICE_GAUGE % (agg, agg, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", CLUSTER_FILTER, WINDOW,
                                           GPU_DEVICE_BY_LABELS, CLUSTER_LABEL)
    rows = opencost_query(prometheus, promql, lambda rows: len(rows) >= len(truth))
    got = {(row["metric"]["UUID"], row["metric"].get("GPU_I_ID", "")): float(row["value"][1]) for row in rows}
    assert got == pytest.approx({key: engine for key, (engine, _decoder) in truth.items()}, abs=1e-9)


def test_gpus_allocated_per_namespace_is_one_sum(stack):
    name, prometheus, _truth, _uids = stack
    if name == "honor_false_exporter_pod_labels":
        by = "exported_namespace"  # with honor_labels false the owner's namespace is renamed
    else:
        by = "namespace"
    rows = opencost_query(prometheus, f"sum by ({by}) (pod_gpu_container_allocated_gpus)",
                          lambda rows: len(rows) >= len(ALLOCATED_PER_NAMESPACE))
    got = {row["metric"][by]: float(row["value"][1]) for row in rows}
    assert got == pytest.approx(ALLOCATED_PER_NAMESPACE, abs=1e-9)


def test_dra_allocations_join_kube_state_metrics_claims(stack):
    name, prometheus, _truth, _uids = stack
    if name == "honor_false_exporter_pod_labels":
        pytest.skip("the owner's namespace is exported_namespace there: the join needs honor_labels")
    (row,) = opencost_query(prometheus, CLAIM_JOIN, lambda rows: len(rows) == 1)
    labels = row["metric"]
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("batch", "train-x7k2p", "main")
    assert (labels["resourceclaim_namespace"], labels["resourceclaim_name"]) == ("batch", "train-gpu")
    assert (labels["claim_name"], labels["resourceclaim_template_name"]) == ("gpu", "train-gpu-template")
    assert labels["UUID"] == UUID3 and labels["device_id"] == "gpu-h100-a"
    others = prometheus.query('pod_gpu_allocation_info{resourceclaim_name!=""}')
    assert [other["metric"]["pod"] for other in others] == ["train-x7k2p"]  # device-plugin devices have none
