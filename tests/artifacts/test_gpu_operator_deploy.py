"""deploy/gpu-operator.yaml: strict schema, and its node-local Services against the GPU operator's real objects.

The operator's objects (tests/data/gpu-operator/) are, for each of its two dcgm-exporter operands (the
ClusterPolicy's nvidia-dcgm-exporter and the DRA mode's nvidia-dcgm-exporter-dra), its DaemonSet and
Service as shipped; kube-proxy itself cannot run here, so what is checked is everything it is given:
which pods each Service selects, which port it reaches, that it keeps traffic on the client's node,
and that the exporter on a node reads the Service of the operand that node runs, and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from exporter.config import Config
from support.deploy_tools import REPO_ROOT, find_object, load_documents, validate_strict
from support.node_scheduling import daemonsets_on, selects as _selects

MANIFEST = REPO_ROOT / "deploy" / "gpu-operator.yaml"
OPERATOR_DIR = Path(__file__).resolve().parents[1] / "data" / "gpu-operator"
OPERANDS = {"classic": OPERATOR_DIR / "nvidia-dcgm-exporter.yaml", "dra": OPERATOR_DIR / "nvidia-dcgm-exporter-dra.yaml"}
OLDEST_SUPPORTED = "1.30.0"


def _all(kind):
    return [d for d in load_documents(MANIFEST) if d["kind"] == kind]


def _ours(kind):
    return find_object(load_documents(MANIFEST), kind)


def _operator(operand, kind):
    return find_object(load_documents(OPERANDS[operand]), kind)


def _pod_template(daemonset):
    return daemonset["spec"]["template"]


def _node_labels(operand):
    """The labels of a node where the operator runs this operand (its DaemonSet's node selector)."""
    return dict(_pod_template(_operator(operand, "DaemonSet"))["spec"]["nodeSelector"])


def _daemonsets_on(node_labels):
    return daemonsets_on(_all("DaemonSet"), node_labels)


def _our_daemonset(operand):
    (daemonset,) = _daemonsets_on(_node_labels(operand))
    return daemonset


def _our_service(operand):
    """Our Service that selects this operand's pods: exactly one."""
    labels = _pod_template(_operator(operand, "DaemonSet"))["metadata"]["labels"]
    (service,) = [s for s in _all("Service") if _selects(s["spec"]["selector"], labels)]
    return service


def _exporter(daemonset):
    (container,) = _pod_template(daemonset)["spec"]["containers"]
    return container


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, "newest"])
def test_manifest_passes_the_strict_kubernetes_schema(version):
    output = validate_strict(MANIFEST, version)
    assert output.count(" passed for resource ") == len(load_documents(MANIFEST)), output


def test_no_second_dcgm_exporter_is_started():
    docs = load_documents(MANIFEST)
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "DaemonSet",
                                              "Namespace", "Service", "Service", "ServiceAccount"]
    for daemonset in _all("DaemonSet"):
        container = _exporter(daemonset)
        assert container["name"] == "pod-gpu-metrics-exporter"
        assert "dcgm" not in container["image"]
        assert "initContainers" not in _pod_template(daemonset)["spec"]


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_one_exporter_per_node_whichever_operand_it_runs(operand):
    # The node label tells the operand apart: nobody names the operator's mode. The operator never
    # runs both operands, so a GPU node gets exactly one exporter pod.
    assert len(_daemonsets_on(_node_labels(operand))) == 1
    assert _daemonsets_on({"nvidia.com/gpu.present": "true"}) == []  # a GPU node without the operator's dcgm-exporter
    names = {d["metadata"]["name"] for d in _all("DaemonSet")}
    assert len(names) == 2


def test_a_node_left_with_both_operands_labels_still_gets_one_exporter():
    # The operator never runs both operands, but a move from one mode to the other can leave the old
    # node label behind: two exporters on such a node would serve every GPU's series twice.
    both = {**_node_labels("classic"), **_node_labels("dra")}
    (daemonset,) = _daemonsets_on(both)
    assert daemonset == _our_daemonset("classic")


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_service_selects_the_operators_dcgm_exporter_pods_and_only_them(operand):
    service, operator = _our_service(operand), _operator(operand, "DaemonSet")
    assert service["metadata"]["namespace"] == operator["metadata"]["namespace"]
    # Never the other operand's pods, never our own exporter pods, and the operator's DaemonSet never adopts ours.
    other = next(o for o in OPERANDS if o != operand)
    assert not _selects(service["spec"]["selector"], _pod_template(_operator(other, "DaemonSet"))["metadata"]["labels"])
    for ours in _all("DaemonSet"):
        labels = _pod_template(ours)["metadata"]["labels"]
        assert not _selects(service["spec"]["selector"], labels)
        assert not _selects(operator["spec"]["selector"]["matchLabels"], labels)


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_service_reaches_the_operators_container_port(operand):
    service, operator = _our_service(operand), _operator(operand, "DaemonSet")
    (port,) = service["spec"]["ports"]
    (container,) = _pod_template(operator)["spec"]["containers"]
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    target = port["targetPort"]
    resolved = by_name[target] if isinstance(target, str) else target
    # The same port dcgm-exporter listens on in the operator's pods.
    listen = {e["name"]: e["value"] for e in container["env"]}["DCGM_EXPORTER_LISTEN"]
    assert resolved == int(listen.rsplit(":", 1)[1]) == 9400
    assert port["protocol"] == "TCP"


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_service_keeps_traffic_on_the_clients_node(operand):
    spec = _our_service(operand)["spec"]
    assert spec["internalTrafficPolicy"] == "Local"
    assert spec.get("type", "ClusterIP") == "ClusterIP"
    # The operator's own Service spreads over every node: the reason this one exists.
    assert _operator(operand, "Service")["spec"].get("internalTrafficPolicy", "Cluster") == "Cluster"


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_endpoints_a_node_sees(operand):
    # The Service's endpoints, then the node-local subset kube-proxy routes to under
    # internalTrafficPolicy: Local, for a cluster of the operator's pods and look-alikes.
    service = _our_service(operand)
    operator_labels = _pod_template(_operator(operand, "DaemonSet"))["metadata"]["labels"]
    namespace = service["metadata"]["namespace"]
    pods = [
        {"name": "dcgm-a", "namespace": namespace, "node": "gpu-a", "labels": operator_labels},
        {"name": "dcgm-b", "namespace": namespace, "node": "gpu-b", "labels": operator_labels},
        # Same labels in another namespace: not this Service's to select.
        {"name": "dcgm-x", "namespace": "other", "node": "gpu-c", "labels": operator_labels},
        {"name": "gpu-feature-discovery-a", "namespace": namespace, "node": "gpu-a",
         "labels": {"app": "gpu-feature-discovery"}},
    ]
    endpoints = [p for p in pods if p["namespace"] == namespace and _selects(service["spec"]["selector"], p["labels"])]
    assert [p["name"] for p in endpoints] == ["dcgm-a", "dcgm-b"]
    local = {node: [p["name"] for p in endpoints if p["node"] == node] for node in ("gpu-a", "gpu-b", "gpu-c")}
    assert local == {"gpu-a": ["dcgm-a"], "gpu-b": ["dcgm-b"], "gpu-c": []}


def test_operators_service_monitor_does_not_pick_up_our_services():
    # It selects Services by label: ours must not match, or dcgm-exporter is scraped twice.
    monitor = _operator("classic", "ServiceMonitor")
    for service in _all("Service"):
        assert not _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"].get("labels", {}))
        assert not _selects({"app": "nvidia-dcgm-exporter-dra"}, service["metadata"].get("labels", {}))
        assert "prometheus.io/scrape" not in service["metadata"].get("annotations", {})


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_exporter_reads_the_node_local_service_of_its_nodes_operand(operand):
    service = _our_service(operand)
    args = dict(a.split("=", 1) for a in _exporter(_our_daemonset(operand))["args"])
    url = urlsplit(args["--dcgm.url"])
    assert url.scheme == "http" and url.path == "/metrics"
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port == service["spec"]["ports"][0]["port"]
    assert args["--kubelet.socket"] == Config().kubelet_socket


def _tolerates(ours, theirs):
    return any(t["key"] == theirs["key"] and t["operator"] == "Exists" and t.get("effect") in (None, theirs.get("effect"))
               for t in ours)


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_exporter_runs_where_the_operator_runs_dcgm_exporter(operand):
    ours = _pod_template(_our_daemonset(operand))["spec"]
    theirs = _pod_template(_operator(operand, "DaemonSet"))["spec"]
    assert ours["nodeSelector"] == theirs["nodeSelector"]
    for toleration in theirs["tolerations"]:
        assert _tolerates(ours["tolerations"], toleration), toleration


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_exporter_pod_is_unprivileged_and_scraped_like_the_daemonset(operand):
    template = _pod_template(_our_daemonset(operand))
    security = _exporter(_our_daemonset(operand))["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]} and not security.get("privileged", False)
    assert template["spec"].get("hostNetwork", False) is False and template["spec"].get("hostPID", False) is False
    assert template["spec"]["priorityClassName"] == "system-node-critical"
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(Config().listen_port)
    assert annotations["prometheus.io/path"] == Config().telemetry_path


@pytest.mark.parametrize("operand", sorted(OPERANDS))
def test_the_api_context_is_on_in_the_operator_shape(operand):
    # README and docs/health.md: health, taints, extra labels, DRA matching and process shares are on
    # by default in a cluster; --kubernetes.api auto needs the token in the exporter's container.
    docs = load_documents(MANIFEST)
    daemonset = _our_daemonset(operand)
    spec = _pod_template(daemonset)["spec"]
    container = _exporter(daemonset)
    assert not any(a.startswith("--kubernetes.api=") for a in container["args"])
    token_volumes = {v["name"] for v in spec["volumes"]
                     if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))}
    mounts = [m for m in container["volumeMounts"] if m["name"] in token_volumes]
    assert [m["mountPath"] for m in mounts] == ["/var/run/secrets/kubernetes.io/serviceaccount"]
    account = find_object(docs, "ServiceAccount", spec["serviceAccountName"])
    binding = find_object(docs, "ClusterRoleBinding")
    assert {"kind": "ServiceAccount", "name": account["metadata"]["name"],
            "namespace": daemonset["metadata"]["namespace"]} in binding["subjects"]
    rules = find_object(docs, "ClusterRole", binding["roleRef"]["name"])["rules"]
    assert any(r["apiGroups"] == [""] and {"list", "watch"} <= set(r["verbs"]) and "pods" in r["resources"] for r in rules)
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


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
