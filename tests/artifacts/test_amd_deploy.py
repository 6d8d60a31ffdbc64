"""deploy/amd.yaml and deploy/amd-beside-nvidia.yaml: strict schema, and their node-local Service and DaemonSet
against the objects AMD's own Helm chart and GPU operator make for AMD's device-metrics-exporter.

AMD's objects (tests/data/amd/metrics-exporter-*.yaml) are, for each way AMD ships its exporter, its DaemonSet,
Service and ServiceMonitor as far as reaching its pods goes; kube-proxy cannot run here, so what is checked is
everything it is given: which pods our Service selects, which port it reaches, that it keeps traffic on the
client's node, that our pods run where AMD's do and mount the folder AMD's write the socket into.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.deploy_tools import DAEMONSET, REPO_ROOT, find_object, load_documents, validate_strict
from support.node_scheduling import daemonsets_on, selects

AMD_ALONE = REPO_ROOT / "deploy" / "amd.yaml"
AMD_BESIDE = REPO_ROOT / "deploy" / "amd-beside-nvidia.yaml"
AMD_DIR = Path(__file__).resolve().parents[1] / "data" / "amd"
AMD_SHIPPED = {"helm chart": AMD_DIR / "metrics-exporter-helm-chart.yaml",
               "gpu operator": AMD_DIR / "metrics-exporter-gpu-operator.yaml"}
OLDEST_SUPPORTED = "1.30.0"
EXPORTER = "pod-gpu-metrics-exporter"


def _theirs(shipped, kind):
    return find_object(load_documents(AMD_SHIPPED[shipped]), kind)


def _their_pod(shipped):
    return _theirs(shipped, "DaemonSet")["spec"]["template"]


def _ours(kind, path=AMD_ALONE):
    return find_object(load_documents(path), kind)


def _our_pod():
    return _ours("DaemonSet")["spec"]["template"]


def _our_container():
    (container,) = _our_pod()["spec"]["containers"]
    assert container["name"] == EXPORTER
    return container


def _flags():
    return dict(arg.removeprefix("--").split("=", 1) for arg in _our_container()["args"])


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, "newest"])
@pytest.mark.parametrize("path", [AMD_ALONE, AMD_BESIDE], ids=lambda p: p.name)
def test_manifest_passes_the_strict_kubernetes_schema(path, version):
    output = validate_strict(path, version)
    assert output.count(" passed for resource ") == len(load_documents(path)), output


def test_alone_it_is_a_whole_install_without_any_nvidia_part():
    docs = load_documents(AMD_ALONE)
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Namespace",
                                              "Service", "ServiceAccount"]
    objects_text = yaml.safe_dump_all(docs).lower()
    assert "nvidia" not in objects_text and "dcgm" not in objects_text


def test_beside_nvidia_it_adds_only_the_amd_part_to_daemonset_yaml():
    beside = load_documents(AMD_BESIDE)
    assert sorted(d["kind"] for d in beside) == ["DaemonSet", "Service"]
    # The same AMD objects as alone, but for the NVIDIA nodes it keeps off; the rest comes from daemonset.yaml.
    alone = _ours("DaemonSet")
    (theirs,) = [d for d in beside if d["kind"] == "DaemonSet"]
    assert theirs["spec"]["template"]["spec"].pop("affinity") and theirs == alone
    assert _ours("Service", AMD_BESIDE) == _ours("Service")
    account = theirs["spec"]["template"]["spec"]["serviceAccountName"]
    assert find_object(load_documents(DAEMONSET), "ServiceAccount", account)["metadata"]["namespace"] == "gpu-monitoring"


@pytest.mark.parametrize("shipped", sorted(AMD_SHIPPED))
def test_service_selects_amds_exporter_pods_in_their_namespace_and_never_ours(shipped):
    service = _ours("Service")
    assert service["metadata"]["namespace"] == _theirs(shipped, "DaemonSet")["metadata"]["namespace"]
    assert selects(service["spec"]["selector"], _their_pod(shipped)["metadata"]["labels"])
    assert not selects(service["spec"]["selector"], _our_pod()["metadata"]["labels"])
    # And AMD's DaemonSet never adopts our pods.
    assert not selects(_theirs(shipped, "DaemonSet")["spec"]["selector"]["matchLabels"], _our_pod()["metadata"]["labels"])


@pytest.mark.parametrize("shipped", sorted(AMD_SHIPPED))
def test_service_reaches_amds_exporter_port_on_the_clients_node_only(shipped):
    service = _ours("Service")
    (port,) = service["spec"]["ports"]
    (container,) = _their_pod(shipped)["spec"]["containers"]
    listen = int({e["name"]: e["value"] for e in container["env"]}["METRICS_EXPORTER_PORT"])
    assert port["targetPort"] == listen == 5000 and port["protocol"] == "TCP"
    assert listen in [p["containerPort"] for p in container["ports"]]
    assert service["spec"]["internalTrafficPolicy"] == "Local" and service["spec"]["type"] == "ClusterIP"


@pytest.mark.parametrize("shipped", sorted(AMD_SHIPPED))
def test_endpoints_a_node_sees(shipped):
    # The Service's endpoints, then the node-local subset kube-proxy routes to under internalTrafficPolicy:
    # Local, for a cluster of AMD's exporter pods and look-alikes.
    service = _ours("Service")
    namespace, labels = service["metadata"]["namespace"], _their_pod(shipped)["metadata"]["labels"]
    pods = [
        {"name": "amd-a", "namespace": namespace, "node": "mi300x-a", "labels": labels},
        {"name": "amd-b", "namespace": namespace, "node": "mi300x-b", "labels": labels},
        # Same labels in another namespace: not this Service's to select.
        {"name": "amd-x", "namespace": "other", "node": "mi300x-c", "labels": labels},
        {"name": "device-plugin-a", "namespace": namespace, "node": "mi300x-a",
         "labels": {"app.kubernetes.io/name": "device-plugin", "daemonset-name": "default"}},
    ]
    endpoints = [p for p in pods if p["namespace"] == namespace and selects(service["spec"]["selector"], p["labels"])]
    assert [p["name"] for p in endpoints] == ["amd-a", "amd-b"]
    local = {node: [p["name"] for p in endpoints if p["node"] == node] for node in ("mi300x-a", "mi300x-b", "mi300x-c")}
    assert local == {"mi300x-a": ["amd-a"], "mi300x-b": ["amd-b"], "mi300x-c": []}


@pytest.mark.parametrize("shipped", sorted(AMD_SHIPPED))
def test_amds_service_monitor_does_not_pick_up_our_service(shipped):
    # It selects Services by label: ours must not match, or AMD's exporter is scraped twice.
    monitor = _theirs(shipped, "ServiceMonitor")
    for path in (AMD_ALONE, AMD_BESIDE):
        service = _ours("Service", path)
        assert not selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        assert "prometheus.io/scrape" not in service["metadata"].get("annotations", {})


def test_exporter_reads_the_node_local_service():
    service = _ours("Service")
    name, namespace, port = service["metadata"]["name"], service["metadata"]["namespace"], service["spec"]["ports"][0]["port"]
    assert _flags()["amd.metrics-url"] == f"http://{name}.{namespace}.svc:{port}/metrics"
    assert _flags()["gpu.vendor"] == "amd"


@pytest.mark.parametrize("shipped", sorted(AMD_SHIPPED))
def test_exporter_mounts_the_folder_amds_exporter_makes_its_socket_in(shipped):
    # AMD's exporter creates its socket in a host folder it mounts; ours mounts the same host folder,
    # read-only, at the path its --amd.metrics-socket names.
    theirs = _their_pod(shipped)
    (their_container,) = theirs["spec"]["containers"]
    their_mounts = {m["mountPath"]: m["name"] for m in their_container["volumeMounts"]}
    their_paths = {v["name"]: v["hostPath"]["path"] for v in theirs["spec"]["volumes"]}
    socket_folder, socket_name = _flags()["amd.metrics-socket"].rsplit("/", 1)
    assert socket_name == "amdgpu_device_metrics_exporter_grpc.socket"
    host_folder = their_paths[their_mounts[socket_folder]]
    ours = {m["mountPath"]: m for m in _our_container()["volumeMounts"]}
    our_paths = {v["name"]: v["hostPath"]["path"] for v in _our_pod()["spec"]["volumes"] if "hostPath" in v}
    assert our_paths[ours[socket_folder]["name"]] == host_folder and ours[socket_folder]["readOnly"] is True
    # And the node's /sys, which AMD's exporter reads too, at --amd.sysfs-root.
    sys_mount = ours[_flags()["amd.sysfs-root"]]
    assert our_paths[sys_mount["name"]] == their_paths[their_mounts["/sys"]] == "/sys" and sys_mount["readOnly"] is True


def test_exporter_runs_where_amds_gpu_operator_runs_its_exporter_and_tolerates_what_it_does():
    ours = _our_pod()["spec"]
    theirs = _their_pod("gpu operator")["spec"]
    assert ours["nodeSelector"] == theirs["nodeSelector"]
    for toleration in theirs["tolerations"]:
        assert any(t["key"] == toleration["key"] and t["operator"] == "Exists" and "effect" not in t
                   for t in ours["tolerations"]), toleration


def test_exporter_pod_is_unprivileged_and_scraped_like_the_nvidia_one():
    template, nvidia = _our_pod(), find_object(load_documents(DAEMONSET), "DaemonSet")["spec"]["template"]
    security = _our_container()["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]} and security["privileged"] is False
    assert not template["spec"].get("hostNetwork") and not template["spec"].get("hostPID")
    assert template["metadata"]["annotations"] == nvidia["metadata"]["annotations"]
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == EXPORTER


def test_with_daemonset_yaml_no_node_gets_two_exporters():
    daemonsets = [find_object(load_documents(DAEMONSET), "DaemonSet"), _ours("DaemonSet", AMD_BESIDE)]
    nvidia, amd = daemonsets
    amd_node = dict(_their_pod("gpu operator")["spec"]["nodeSelector"])
    assert daemonsets_on(daemonsets, amd_node) == [amd]
    assert daemonsets_on(daemonsets, {"nvidia.com/gpu.present": "true"}) == [nvidia]
    assert daemonsets_on(daemonsets, {"nvidia.com/gpu.present": "true", **amd_node}) == [nvidia]
    # Without the exclusion (deploy/amd.yaml's DaemonSet) that node would get both.
    assert len(daemonsets_on([nvidia, _ours("DaemonSet")], {"nvidia.com/gpu.present": "true", **amd_node})) == 2
