"""daemonset.yaml and prometheus/*.yaml: Kubernetes schema (kubernetes-validate --strict) and what no schema checks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from support.deploy_tools import (
    DAEMONSET,
    DEPLOYMENT,
    PODMONITOR,
    PROMETHEUS_DIR,
    SHIPPED_RULE_FILES,
    cluster_role_grants,
    configmap_data,
    find_object,
    load_documents,
    missing_tool,
)

try:
    import kubernetes_validate.utils as kv_utils
except ImportError:  # judged per test, so that the other checks still run
    kv_utils = None

from exporter.config import Config

BUILTIN_FILES = [DAEMONSET, *sorted(PROMETHEUS_DIR.glob("*.yaml"))]
OLDEST_SUPPORTED = "1.30.0"
EXPORTER = "pod-gpu-metrics-exporter"


def _validator():
    if kv_utils is None:
        missing_tool("kubernetes-validate", "pip install kubernetes-validate (the test extra has it)")
    return kv_utils


def _kubernetes_validate(version: str, *paths: Path) -> subprocess.CompletedProcess:
    _validator()
    return subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version, *map(str, paths)],
        capture_output=True, text=True, timeout=120,
    )


def _versions():
    newest = kv_utils.latest_version() if kv_utils is not None else "newest"
    return [OLDEST_SUPPORTED, newest]


def _daemonset():
    return find_object(load_documents(DAEMONSET), "DaemonSet")


def _pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def _container(pod_spec, name):
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def _pod_workloads():
    docs = load_documents(DAEMONSET) + load_documents(DEPLOYMENT)
    return [d for d in docs if d["kind"] in ("DaemonSet", "Deployment")]


@pytest.mark.parametrize("version", _versions())
def test_manifests_pass_the_strict_kubernetes_schema(version):
    result = _kubernetes_validate(version, *BUILTIN_FILES)
    assert result.returncode == 0, result.stdout + result.stderr
    # A kind without a schema only warns: make sure every object was really checked.
    assert "WARN" not in result.stdout, result.stdout
    objects = sum(len(load_documents(p)) for p in BUILTIN_FILES)
    assert result.stdout.count(" passed for resource ") == objects, result.stdout


def test_strict_validation_rejects_a_misspelt_field(tmp_path):
    # Proves the check above can fail: the same DaemonSet with one field name misspelt.
    broken = tmp_path / "daemonset.yaml"
    broken.write_text(DAEMONSET.read_text().replace("readOnlyRootFilesystem:", "readOnlyRootFilesytem:"))
    result = _kubernetes_validate(OLDEST_SUPPORTED, broken)
    assert result.returncode != 0 and "readOnlyRootFilesytem" in result.stdout, result.stdout


def test_daemonset_selector_matches_its_pod_labels():
    for workload in _pod_workloads():
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector and selector.items() <= labels.items(), workload["metadata"]["name"]


def test_probe_ports_are_declared_container_ports():
    for workload in _pod_workloads():
        for container in _pod_spec(workload)["containers"]:
            ports = {p.get("name") for p in container.get("ports", [])} | {
                p["containerPort"] for p in container.get("ports", [])}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if probe in container:
                    port = container[probe]["httpGet"]["port"]
                    assert port in ports, f"{container['name']} {probe} port {port!r} not in {ports}"


def test_volume_mounts_name_real_volumes():
    for workload in _pod_workloads():
        spec = _pod_spec(workload)
        volumes = {v["name"] for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{container['name']} mounts unknown volume {mount['name']}"


def test_pod_resources_host_path_is_mounted_read_only():
    spec = _pod_spec(_daemonset())
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {"pod-resources": "/var/lib/kubelet/pod-resources"}
    socket_dir = str(Path(Config().kubelet_socket).parent)
    mounts = [m for c in spec["containers"] for m in c.get("volumeMounts", []) if m["name"] in host_paths]
    assert mounts and all(m.get("readOnly") is True for m in mounts)
    assert {m["mountPath"] for m in mounts} == {socket_dir}


def test_exporter_container_is_unprivileged_and_read_only():
    spec = _pod_spec(_daemonset())
    ours = _container(spec, EXPORTER)["securityContext"]
    assert ours.get("privileged", False) is False
    assert ours["allowPrivilegeEscalation"] is False
    assert ours["readOnlyRootFilesystem"] is True
    assert ours["capabilities"] == {"drop": ["ALL"]}
    assert ours["runAsUser"] == 0  # the kubelet socket is root-owned
    assert spec.get("hostNetwork", False) is False and spec.get("hostPID", False) is False


def test_every_container_has_requests_and_limits():
    for workload in _pod_workloads():
        for container in _pod_spec(workload)["containers"]:
            resources = container["resources"]
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[part]), f"{container['name']} {part}"


def test_scrape_annotations_match_the_exporter_defaults():
    daemonset = _daemonset()
    annotations = daemonset["spec"]["template"]["metadata"]["annotations"]
    ours = _container(_pod_spec(daemonset), EXPORTER)
    defaults = Config()
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(defaults.listen_port)
    assert annotations["prometheus.io/path"] == defaults.telemetry_path
    assert {"name": "metrics", "containerPort": defaults.listen_port, "protocol": "TCP"} in ours["ports"]
    # The container keeps the default listen address and path, which the annotations describe.
    assert not any(a.startswith(("--web.listen-address", "--web.telemetry-path")) for a in ours["args"])
    assert "/healthz" == ours["livenessProbe"]["httpGet"]["path"] == ours["readinessProbe"]["httpGet"]["path"]


def test_dcgm_exporter_listens_where_the_exporter_reads():
    spec = _pod_spec(_daemonset())
    dcgm = _container(spec, "dcgm-exporter")
    assert re.fullmatch(r"nvcr\.io/nvidia/k8s/dcgm-exporter:4\.\d+\.\d+-4\.\d+\.\d+-ubuntu\d+\.\d+", dcgm["image"])
    listen = {e["name"]: e["value"] for e in dcgm["env"]}["DCGM_EXPORTER_LISTEN"]
    args = dict(a.split("=", 1) for a in _container(spec, EXPORTER)["args"])
    url = urlsplit(args["--dcgm.url"])
    assert listen == f"{url.hostname}:{url.port}" == "127.0.0.1:9401"
    assert args["--dcgm.url"] == Config().dcgm_url  # stated explicitly, equal to the default
    assert args["--kubelet.socket"] == Config().kubelet_socket


def test_bundled_dcgm_exporter_sees_gpus_where_the_env_var_is_ignored_when_unprivileged():
    # Hardened NVIDIA container toolkits honour NVIDIA_VISIBLE_DEVICES only for privileged
    # containers; the exporter's own container stays unprivileged (test above).
    dcgm = _container(_pod_spec(_daemonset()), "dcgm-exporter")
    assert {e["name"]: e["value"] for e in dcgm["env"]}["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert dcgm["securityContext"]["privileged"] is True
    assert "nvidia.com/gpu" not in dcgm["resources"].get("limits", {})


def test_daemonset_targets_gpu_nodes_and_tolerates_their_taint():
    spec = _pod_spec(_daemonset())
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" for t in spec["tolerations"])


def test_prometheus_has_only_pod_read_access_and_no_host_network():
    docs = load_documents(DEPLOYMENT)
    spec = _pod_spec(find_object(docs, "Deployment"))
    account = find_object(docs, "ServiceAccount", spec["serviceAccountName"])
    role = find_object(docs, "ClusterRole")
    binding = find_object(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert spec.get("hostNetwork", False) is False


def test_prometheus_reads_config_and_rules_from_the_configmap():
    spec = _pod_spec(find_object(load_documents(DEPLOYMENT), "Deployment"))
    container = spec["containers"][0]
    volume = next(v for v in spec["volumes"] if "configMap" in v)
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert volume["configMap"]["name"] == "prometheus-config"
    data = configmap_data()
    config_file = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--config.file="))
    assert config_file == f"{mount['mountPath']}/prometheus.yml"
    rule_files = yaml.safe_load(data["prometheus.yml"])["rule_files"]
    assert rule_files == [f"{mount['mountPath']}/{key}" for key in SHIPPED_RULE_FILES]


def test_configmap_rules_are_the_rule_files():
    # One source of truth: prometheus/rules/ is what promtool tests; the ConfigMap must ship each file.
    data = configmap_data()
    for key, path in SHIPPED_RULE_FILES.items():
        assert data.get(key) == path.read_text(encoding="utf-8"), (
            f"{key} in prometheus/prometheus-configmap.yaml differs from {path}: paste the file "
            "under data (indented by four spaces)")


def test_scrape_job_keys_on_the_daemonset_annotations():
    config = yaml.safe_load(configmap_data()["prometheus.yml"])
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "pod-gpu-metrics")
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}] and job["honor_labels"] is True
    rules = {tuple(r["source_labels"]): r for r in job["relabel_configs"]}
    template = _daemonset()["spec"]["template"]["metadata"]
    keep_scrape = rules[("__meta_kubernetes_pod_annotation_prometheus_io_scrape",)]
    assert keep_scrape["action"] == "keep"
    assert re.fullmatch(keep_scrape["regex"], template["annotations"]["prometheus.io/scrape"])
    keep_name = rules[("__meta_kubernetes_pod_label_app_kubernetes_io_name",)]
    assert re.fullmatch(keep_name["regex"], template["labels"]["app.kubernetes.io/name"])
    assert rules[("__meta_kubernetes_pod_annotation_prometheus_io_path",)]["target_label"] == "__metrics_path__"
    assert rules[("__meta_kubernetes_pod_node_name",)]["target_label"] == "node"
    address = [r for r in job["relabel_configs"] if r.get("target_label") == "__address__"]
    assert {r["replacement"] for r in address} == {"$1:$2", "[$1]:$2"}


def test_kubectl_create_of_the_prometheus_folder_needs_no_custom_resources():
    # `kubectl create -f prometheus/` reads every .yaml/.yml/.json directly in the folder.
    for path in sorted(PROMETHEUS_DIR.iterdir()):
        if path.suffix in (".yaml", ".yml", ".json"):
            for doc in load_documents(path):
                assert doc["apiVersion"] in ("v1", "apps/v1", "rbac.authorization.k8s.io/v1"), path
                if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                    assert doc["metadata"]["namespace"] == _daemonset()["metadata"]["namespace"], path


def test_podmonitor_targets_the_daemonset_pods():
    monitor = find_object(load_documents(PODMONITOR), "PodMonitor")
    daemonset = _daemonset()
    template = daemonset["spec"]["template"]["metadata"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["labels"].items()
    assert daemonset["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    ports = {p["name"] for p in _container(_pod_spec(daemonset), EXPORTER)["ports"]}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    assert endpoint["path"] == template["annotations"]["prometheus.io/path"]
    assert endpoint["honorLabels"] is True


def test_podmonitor_checked_as_far_as_the_tool_can(tmp_path):
    # kubernetes-validate has no schema for CRDs: it says so and skips the object. Its
    # bundled Kubernetes definitions still check the parts PodMonitor borrows from core.
    result = _kubernetes_validate(OLDEST_SUPPORTED, PODMONITOR)
    assert "Couldn't find schema for kind PodMonitor" in result.stdout, result.stdout
    monitor = find_object(load_documents(PODMONITOR), "PodMonitor")
    assert _core_schema_errors("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", monitor["metadata"]) == []
    assert _core_schema_errors("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", monitor["spec"]["selector"]) == []
    # The rest against the field names of prometheus-operator's monitoring.coreos.com/v1 CRD.
    assert set(monitor["spec"]) <= {"selector", "namespaceSelector", "podMetricsEndpoints", "jobLabel",
                                    "podTargetLabels", "sampleLimit", "targetLimit", "attachMetadata"}
    assert set(monitor["spec"]["namespaceSelector"]) <= {"any", "matchNames"}
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        assert set(endpoint) <= {"port", "portNumber", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
                                 "honorTimestamps", "relabelings", "metricRelabelings", "params", "tlsConfig"}
        for relabeling in endpoint.get("relabelings", []):
            assert set(relabeling) <= {"sourceLabels", "separator", "targetLabel", "regex", "modulus",
                                       "replacement", "action"}


def _core_schema_errors(definition: str, value) -> list:
    from importlib.resources import files

    import jsonschema
    from referencing import Registry, Resource

    folder = f"v{OLDEST_SUPPORTED}-local-strict"
    text = files("kubernetes_validate").joinpath("kubernetes-json-schema", folder, "_definitions.json").read_text()
    definitions = json.loads(text)
    registry = Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))
    schema = {"$ref": f"{definitions['$id']}#/$defs/{definition}"}
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [e.message for e in validator.iter_errors(value)]


# --- Kubernetes API access (--kubernetes.api): service account, least-privilege RBAC, node name ---
EXPORTER_RULES = {  # (API group, resource) → verbs, exactly as daemonset.yaml grants them for the Kubernetes context
    ("", "pods"): {"get", "list", "watch"},
    # Workload: `get` (metadata only) of each owner kind on the way to the top controller.
    ("apps", "replicasets"): {"get"},
    ("apps", "deployments"): {"get"},
    ("apps", "statefulsets"): {"get"},
    ("apps", "daemonsets"): {"get"},
    ("batch", "jobs"): {"get"},
    ("batch", "cronjobs"): {"get"},
    ("argoproj.io", "rollouts"): {"get"},
    ("jobset.x-k8s.io", "jobsets"): {"get"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get"},
    ("resource.k8s.io", "resourceslices"): {"list", "watch"},
    ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},
    # DeviceTaintRules, whose taints join the slices' own in pod_gpu_device_taint.
    ("resource.k8s.io", "devicetaintrules"): {"list", "watch"},
    # --labels.extra queue: a pod's Kueue LocalQueue and Volcano PodGroup, one get each.
    ("kueue.x-k8s.io", "localqueues"): {"get"},
    ("scheduling.volcano.sh", "podgroups"): {"get"},
}


def test_cluster_role_is_least_privilege_read_only():
    grants = cluster_role_grants()
    assert grants == EXPORTER_RULES
    assert all("*" not in verbs and not verbs & {"create", "update", "patch", "delete"} for verbs in grants.values())


def test_service_account_is_bound_and_its_token_reaches_only_the_exporter():
    docs = load_documents(DAEMONSET)
    account = find_object(docs, "ServiceAccount")
    binding = find_object(docs, "ClusterRoleBinding")
    daemonset = _daemonset()
    spec = _pod_spec(daemonset)
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert account["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": find_object(docs, "ClusterRole")["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    # No token pod-wide (dcgm-exporter has no use for one); the exporter mounts it where in-cluster
    # clients look for it.
    assert spec["automountServiceAccountToken"] is False
    token_volumes = {v["name"] for v in spec["volumes"]
                     if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))}
    for container in spec["containers"]:
        mounts = {m["name"]: m for m in container.get("volumeMounts", []) if m["name"] in token_volumes}
        if container["name"] == EXPORTER:
            assert [m["mountPath"] for m in mounts.values()] == ["/var/run/secrets/kubernetes.io/serviceaccount"]
            assert all(m["readOnly"] for m in mounts.values())
        else:
            assert not mounts, container["name"]


def test_node_name_comes_from_the_downward_api():
    ours = _container(_pod_spec(_daemonset()), EXPORTER)
    env = {e["name"]: e for e in ours["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "--kubernetes.api=off" not in ours["args"]
