"""deploy/gpu-operator.yaml: strict schema, and its node-local Service against the GPU operator's real objects.

The operator's objects (tests/data/gpu-operator/) are its DaemonSet, Service and ServiceMonitor as
shipped; kube-proxy itself cannot run here, so what is checked is everything it is given: which
pods the Service selects, which port it reaches, that it keeps traffic on the client's node, and
that the exporter reads it and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from exporter.config import Config
from support.deploy_tools import REPO_ROOT, find_object, load_documents, validate_strict

MANIFEST = REPO_ROOT / "deploy" / "gpu-operator.yaml"
OPERATOR = Path(__file__).resolve().parents[1] / "data" / "gpu-operator" / "nvidia-dcgm-exporter.yaml"
OLDEST_SUPPORTED = "1.30.0"


def _ours(kind):
    return find_object(load_documents(MANIFEST), kind)


def _operator(kind):
    return find_object(load_documents(OPERATOR), kind)


def _selects(selector: dict, labels: dict) -> bool:
    """Equality-based selection, as a Service's selector and matchLabels select."""
    return bool(selector) and selector.items() <= labels.items()


def _pod_template(daemonset):
    return daemonset["spec"]["template"]


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, "newest"])
def test_manifest_passes_the_strict_kubernetes_schema(version):
    output = validate_strict(MANIFEST, version)
    assert output.count(" passed for resource ") == len(load_documents(MANIFEST)), output


def test_no_second_dcgm_exporter_is_started():
    docs = load_documents(MANIFEST)
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "Namespace", "Service"]
    (container,) = _pod_template(_ours("DaemonSet"))["spec"]["containers"]
    assert container["name"] == "pod-gpu-metrics-exporter"
    assert "dcgm" not in container["image"]
    assert "initContainers" not in _pod_template(_ours("DaemonSet"))["spec"]


def test_service_selects_the_operators_dcgm_exporter_pods_and_only_them():
    service, operator = _ours("Service"), _operator("DaemonSet")
    assert service["metadata"]["namespace"] == operator["metadata"]["namespace"]
    assert _selects(service["spec"]["selector"], _pod_template(operator)["metadata"]["labels"])
    # Never our own exporter pods, and the operator's DaemonSet never adopts ours either.
    ours = _pod_template(_ours("DaemonSet"))["metadata"]["labels"]
    assert not _selects(service["spec"]["selector"], ours)
    assert not _selects(operator["spec"]["selector"]["matchLabels"], ours)


def test_service_reaches_the_operators_container_port():
    service, operator = _ours("Service"), _operator("DaemonSet")
    (port,) = service["spec"]["ports"]
    (container,) = _pod_template(operator)["spec"]["containers"]
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    target = port["targetPort"]
    resolved = by_name[target] if isinstance(target, str) else target
    # The same port dcgm-exporter listens on in the operator's pods.
    listen = {e["name"]: e["value"] for e in container["env"]}["DCGM_EXPORTER_LISTEN"]
    assert resolved == int(listen.rsplit(":", 1)[1]) == 9400
    assert port["protocol"] == "TCP"


def test_service_keeps_traffic_on_the_clients_node():
    spec = _ours("Service")["spec"]
    assert spec["internalTrafficPolicy"] == "Local"
    assert spec.get("type", "ClusterIP") == "ClusterIP"
    # The operator's own Service spreads over every node: the reason this one exists.
    assert _operator("Service")["spec"].get("internalTrafficPolicy", "Cluster") == "Cluster"


def test_endpoints_a_node_sees(tmp_path):
    # The Service's endpoints, then the node-local subset kube-proxy routes to under
    # internalTrafficPolicy: Local, for a cluster of the operator's pods and look-alikes.
    service = _ours("Service")
    operator_labels = _pod_template(_operator("DaemonSet"))["metadata"]["labels"]
    namespace = service["metadata"]["namespace"]
    pods = [
        {"name": "nvidia-dcgm-exporter-a", "namespace": namespace, "node": "gpu-a", "labels": operator_labels},
        {"name": "nvidia-dcgm-exporter-b", "namespace": namespace, "node": "gpu-b", "labels": operator_labels},
        # Same labels in another namespace: not this Service's to select.
        {"name": "dcgm-exporter-x", "namespace": "other", "node": "gpu-c", "labels": operator_labels},
        {"name": "gpu-feature-discovery-a", "namespace": namespace, "node": "gpu-a",
         "labels": {"app": "gpu-feature-discovery"}},
    ]
    endpoints = [p for p in pods if p["namespace"] == namespace and _selects(service["spec"]["selector"], p["labels"])]
    assert [p["name"] for p in endpoints] == ["nvidia-dcgm-exporter-a", "nvidia-dcgm-exporter-b"]
    local = {node: [p["name"] for p in endpoints if p["node"] == node] for node in ("gpu-a", "gpu-b", "gpu-c")}
    assert local == {"gpu-a": ["nvidia-dcgm-exporter-a"], "gpu-b": ["nvidia-dcgm-exporter-b"], "gpu-c": []}


def test_operators_service_monitor_does_not_pick_up_our_service():
    # It selects Services by label: ours must not match, or dcgm-exporter is scraped twice.
    monitor = _operator("ServiceMonitor")
    service = _ours("Service")
    assert not _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"].get("labels", {}))
    assert "prometheus.io/scrape" not in service["metadata"].get("annotations", {})


def test_exporter_reads_the_node_local_service():
    service = _ours("Service")
    (container,) = _pod_template(_ours("DaemonSet"))["spec"]["containers"]
    args = dict(a.split("=", 1) for a in container["args"])
    url = urlsplit(args["--dcgm.url"])
    assert url.scheme == "http" and url.path == "/metrics"
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert args["--kubelet.socket"] == Config().kubelet_socket


def test_exporter_runs_where_the_operator_runs_dcgm_exporter():
    ours = _pod_template(_ours("DaemonSet"))["spec"]
    theirs = _pod_template(_operator("DaemonSet"))["spec"]
    assert ours["nodeSelector"] == theirs["nodeSelector"]
    for toleration in theirs["tolerations"]:
        assert toleration in ours["tolerations"]


def test_exporter_pod_is_unprivileged_and_scraped_like_the_daemonset():
    template = _pod_template(_ours("DaemonSet"))
    (container,) = template["spec"]["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]} and not security.get("privileged", False)
    assert template["spec"].get("hostNetwork", False) is False
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(Config().listen_port)
    assert annotations["prometheus.io/path"] == Config().telemetry_path


@pytest.mark.parametrize("dcgm_side", ["no endpoint: refused", "no answer: timeout"])
def test_no_dcgm_exporter_on_the_node_is_dcgm_up_0(dcgm_side, kubelet, run_exporter, hanging_server):
    # What the exporter sees when the node-local Service has no endpoint on its node:
    # kube-proxy rejects the connection, or drops it and it times out.
    if dcgm_side.startswith("no endpoint"):
        url = f"http://127.0.0.1:{_closed_port()}/metrics"
    else:
        url = hanging_server
    exporter = run_exporter(["--dcgm.url", url, "--dcgm.timeout", "500ms", "--kubelet.socket", kubelet.socket_path])
    text = requests.get(exporter.url(), timeout=10).text
    assert "pod_gpu_exporter_dcgm_up 0" in text.splitlines()
    assert not [line for line in text.splitlines() if line.startswith("DCGM_")]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def hanging_server():
    """A TCP server that accepts and never answers: what a dropped connection looks like to a client."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}/metrics"
    server.close()
