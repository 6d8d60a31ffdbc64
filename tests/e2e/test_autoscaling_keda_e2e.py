"""keda-scaledobject.yaml's query, as KEDA sends it, on a real Prometheus scraping the real exporter run with
--labels.extra workload: exactly one element, the mean of the workload's pods' GPU use; and the pod-name form its
comments offer answers the same."""

from __future__ import annotations

import urllib.parse

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.autoscaling import RECORD, keda_pod_name_query, keda_trigger, prometheus_scraping, query
from support.kube_e2e import add_pod, start
from support.prometheus_server import DEADLINE_SECONDS
from support.waiting import wait_until

# (UUID, utilisation %, holder): two pods of Deployment inference/llm-server and one of another Deployment.
GPUS = [("GPU-0b0f5a1e-5c1a-4a7e-9b1d-6f1e2a3b4c01", 40, "llm-server-7d9f8-x2k4q"),
        ("GPU-0b0f5a1e-5c1a-4a7e-9b1d-6f1e2a3b4c02", 70, "llm-server-7d9f8-p8m3z"),
        ("GPU-0b0f5a1e-5c1a-4a7e-9b1d-6f1e2a3b4c03", 95, "embedder-5c6d4-q1w2e")]


def _dcgm_body() -> bytes:
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    lines += [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{index}",UUID="{uuid}",device="nvidia{index}",modelName="NVIDIA L4"}} {util}'
              for index, (uuid, util, _pod) in enumerate(GPUS)]
    return ("\n".join(lines) + "\n").encode()


def _add_workloads(api):
    for deployment, replica_set in (("llm-server", "llm-server-7d9f8"), ("embedder", "embedder-5c6d4")):
        api.put("apps/v1", "replicasets", {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": replica_set, "namespace": "inference", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "uid": f"uid-{deployment}",
                 "controller": True}]}, "spec": {"selector": {}, "template": {}}})
    for _uuid, _util, pod in GPUS:
        add_pod(api, "inference", pod, owner=("ReplicaSet", pod.rsplit("-", 1)[0]))


@pytest.fixture
def prometheus(node, api, run_exporter):
    kubelet, dcgm, _ = node
    dcgm.body = _dcgm_body()
    _add_workloads(api)
    kubelet.set_devices([AllocatedDevice("inference", pod, "main", "nvidia.com/gpu", uuid) for uuid, _util, pod in GPUS])
    exporter = start(run_exporter, node, "--labels.extra", "workload")
    with prometheus_scraping(urllib.parse.urlsplit(exporter.url()).netloc, "pgx-keda-") as server:
        wait_until(lambda: len(query(server, 'pod_gpu_allocation_info{workload="llm-server"}')) == 2 and
                   len(query(server, RECORD)) == 3, DEADLINE_SECONDS, 0.5, "the workload's pods and their values")
        yield server


def test_the_scaledobject_query_and_its_pod_name_form_answer_the_workloads_mean_as_one_element(prometheus):
    # One stack for both forms: each start of the exporter, the API and Prometheus costs seconds.
    for promql in (keda_trigger()["metadata"]["query"], keda_pod_name_query()):
        result = query(prometheus, promql)
        assert len(result) == 1 and result[0]["metric"] == {}, (promql, result)
        assert float(result[0]["value"][1]) == pytest.approx((0.40 + 0.70) / 2), promql  # never embedder's 0.95
