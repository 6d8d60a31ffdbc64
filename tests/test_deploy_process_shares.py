"""deploy/daemonset-process-shares.yaml: strict Kubernetes schema, and what process mode needs that no schema checks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from deploy_tools import DAEMONSET, REPO_ROOT, find_object, load_documents, missing_tool
from exporter.config import parse_config

try:
    import kubernetes_validate.utils as kv_utils
except ImportError:
    kv_utils = None

VARIANT = REPO_ROOT / "deploy" / "daemonset-process-shares.yaml"
EXPORTER = "pod-gpu-metrics-exporter"
READ_VERBS = {"get", "list", "watch"}


def documents():
    return load_documents(VARIANT)


def daemonset():
    return find_object(documents(), "DaemonSet")


def exporter_container():
    return next(c for c in daemonset()["spec"]["template"]["spec"]["containers"] if c["name"] == EXPORTER)


@pytest.mark.parametrize("version", ["1.30.0", "newest"])
def test_variant_passes_the_strict_kubernetes_schema(version):
    if kv_utils is None:
        missing_tool("kubernetes-validate", "pip install kubernetes-validate (.ci/deploy-setup.sh does)")
    version = kv_utils.latest_version() if version == "newest" else version
    result = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version, str(VARIANT)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARN" not in result.stdout and result.stdout.count(" passed for resource ") == len(documents()), result.stdout


def test_variant_replaces_the_default_daemonset():
    base, variant = find_object(load_documents(DAEMONSET), "DaemonSet"), daemonset()
    for part in ("name", "namespace", "labels"):
        assert variant["metadata"][part] == base["metadata"][part]
    assert variant["spec"]["selector"] == base["spec"]["selector"]
    assert variant["spec"]["template"]["metadata"] == base["spec"]["template"]["metadata"]  # scrape annotations too
    assert variant["spec"]["selector"]["matchLabels"].items() <= variant["spec"]["template"]["metadata"]["labels"].items()


def test_process_mode_sees_host_pids_nvml_and_this_nodes_pods():
    spec = daemonset()["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["automountServiceAccountToken"] is True
    container = exporter_container()
    config = parse_config(container["args"], {})  # the real flag parser accepts them
    assert (config.sharing_mode, config.sharing_proc_root) == ("process", "/proc")
    env = {item["name"]: item for item in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "resources" in container and "nvidia.com/gpu" not in str(container["resources"])  # takes no GPU away


def test_exporter_container_keeps_its_restrictions():
    security = exporter_container()["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True and security["capabilities"] == {"drop": ["ALL"]}
    mounts = exporter_container()["volumeMounts"]
    assert all(mount["readOnly"] is True for mount in mounts)


def test_service_account_is_bound_to_read_only_rules_that_cover_the_pod_watch():
    docs = documents()
    spec = daemonset()["spec"]["template"]["spec"]
    account = find_object(docs, "ServiceAccount")
    binding = find_object(docs, "ClusterRoleBinding")
    role = find_object(docs, "ClusterRole", binding["roleRef"]["name"])
    assert account["metadata"]["name"] == spec["serviceAccountName"]
    assert account["metadata"]["namespace"] == daemonset()["metadata"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert all(set(rule["verbs"]) <= READ_VERBS for rule in role["rules"])
    pods = [rule for rule in role["rules"] if rule["apiGroups"] == [""] and "pods" in rule["resources"]]
    assert pods and {"list", "watch"} <= set(pods[0]["verbs"])
