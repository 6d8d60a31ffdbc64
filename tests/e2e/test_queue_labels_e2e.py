"""--labels.extra queue against the real exporter and the fake API server: Kueue LocalQueues (v1beta2, and a
cluster serving only v1beta1), the label only on a pod's owners, Volcano pods and PodGroups, KAI Scheduler
Queues; both label modes; a cluster without the CRDs."""

from __future__ import annotations

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import cluster_role_grants
from support.kube_e2e import lines_of, scrape, start
from support.kube_queues import EXPECTED, put_local_queues, put_queued_pods, serve_kai, serve_kueue, serve_volcano
from support.kube_scenario import UUID1
from support.waiting import wait_until


def gpu_devices(pods, namespace="team"):
    return [AllocatedDevice(namespace, pod, "main", "nvidia.com/gpu.shared", f"{UUID1}::{i}")
            for i, pod in enumerate(pods)]


def queued_node(api, node, version: str = "kueue.x-k8s.io/v1beta2") -> list:
    """Kueue (at `version`), Volcano and KAI served, their queues and the queued pods put, each pod holding a
    share of one GPU on the node's kubelet; returns the pods' names."""
    serve_kueue(api, version)
    serve_volcano(api)
    serve_kai(api)
    put_local_queues(api, version)
    pods = put_queued_pods(api)
    node[0].set_devices(gpu_devices(pods))
    return pods


def queue_text(exporter, pods, metric="DCGM_"):
    """A scrape in which every pod's `metric` lines carry the queue labels."""
    def ready():
        text = scrape(exporter)
        return text if all(any(line.startswith(metric) and 'cluster_queue="' in line for line in lines_of(text, pod))
                           for pod in pods) else None
    return wait_until(ready, 30)


def assert_queues(text, metric, expected=EXPECTED):
    for pod, (cluster_queue, local_queue) in expected.items():
        lines = [line for line in lines_of(text, pod) if line.startswith(metric)]
        labels = f'cluster_queue="{cluster_queue}",local_queue="{local_queue}"'
        assert lines and all(labels in line for line in lines), (pod, lines[:1])


@pytest.mark.parametrize("version", ["kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"])
def test_each_pod_gets_its_queue_in_samples_mode(node, api, run_exporter, version):
    pods = queued_node(api, node, version)
    exporter = start(run_exporter, node, "--labels.extra", "workload,queue")
    text = queue_text(exporter, pods)
    assert_queues(text, "DCGM_")
    assert_queues(text, "pod_gpu_allocation_info")
    # After the workload labels, in the contract's order.
    assert 'workload_kind="Job",workload="train",cluster_queue="cq-research",local_queue="lq-train"}' in text
    # Each LocalQueue and PodGroup read once; scrapes and later refreshes read nothing more.
    gets = api.request_count("get")
    for _ in range(5):
        scrape(exporter)
    assert api.request_count("get") == gets
    log = exporter.stderr_text()
    assert "Traceback" not in log and "forbid" not in log, log


def test_join_mode_puts_the_queues_on_the_allocation_rows(node, api, run_exporter):
    pods = queued_node(api, node)
    exporter = start(run_exporter, node, "--labels.extra", "queue", "--labels.mode", "join")
    text = queue_text(exporter, pods, "pod_gpu_allocation_info")
    assert_queues(text, "pod_gpu_allocation_info")
    assert not [line for line in text.splitlines() if line.startswith("DCGM_") and "cluster_queue" in line]


def test_without_the_crds_the_labels_are_empty_and_nothing_fails(node, api, run_exporter):
    pods = put_queued_pods(api)  # the pods still carry Kueue's label and name PodGroups
    node[0].set_devices(gpu_devices(pods))
    exporter = start(run_exporter, node, "--labels.extra", "queue")
    text = queue_text(exporter, pods)
    # A queue named on the pod itself needs no object: Volcano's label is taken as it is.
    expected = {pod: ("q-vision", "") if pod == "vc-worker-0" else ("", "") for pod in pods}
    assert_queues(text, "DCGM_", expected)
    gets = api.request_count("get") + api.request_count("discover")
    for _ in range(5):
        scrape(exporter)
    assert api.request_count("get") + api.request_count("discover") == gets  # never retried per scrape
    log = exporter.wait_for_log("localqueues.kueue.x-k8s.io is not served",
                                "podgroups.scheduling.volcano.sh is not served", "queues.scheduling.run.ai is not served")
    assert "Traceback" not in log and '"level": "error"' not in log, log
    assert log.count("localqueues.kueue.x-k8s.io is not served") == 1, log
    assert log.count("podgroups.scheduling.volcano.sh is not served") == 1, log
    assert log.count("queues.scheduling.run.ai is not served") == 1, log
    # One discovery read of KAI's group for its three pods, not one per pod or per refresh.
    assert [p for v, p in api.requests if v == "discover"].count("scheduling.run.ai/v2") == 1


def test_a_forbidden_queue_read_leaves_the_labels_empty_logged_once(node, api, run_exporter):
    pods = queued_node(api, node)
    api.forbidden["localqueues"] = "get"  # the exporter's reads only: the objects are in place
    exporter = start(run_exporter, node, "--labels.extra", "queue")
    text = queue_text(exporter, pods)
    kueue_pods = {"plain-0", "train-x7k2p", "sweep-0-abc12"}
    assert_queues(text, "DCGM_", {pod: ("", "") if pod in kueue_pods else queues for pod, queues in EXPECTED.items()})
    for _ in range(3):
        scrape(exporter)
    log = exporter.wait_for_log("cannot read localqueues.kueue.x-k8s.io (403)", "needs verb 'get' on 'localqueues'")
    assert log.count("cannot read localqueues.kueue.x-k8s.io (403)") == 1, log
    assert "needs verb 'get' on 'localqueues' in API group 'kueue.x-k8s.io'" in log


def test_the_charts_queue_shape_grants_the_queue_reads(node, api, run_exporter):
    grants = cluster_role_grants("api-queue-values.yaml")  # the chart with --labels.extra queue (needs helm)
    pods = queued_node(api, node)
    exporter = start(run_exporter, node, "--labels.extra", "queue")
    queue_text(exporter, pods)
    made = {(group, plural, verb) for verb, group, plural in api.resource_requests if verb == "get"}
    assert {(group, plural) for group, plural, _ in made} >= {
        ("kueue.x-k8s.io", "localqueues"), ("scheduling.volcano.sh", "podgroups"), ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"), ("scheduling.run.ai", "queues")}
    assert all(verb in grants.get((group, plural), ()) for group, plural, verb in made), made
