"""deploy/daemonset-process-shares.yaml: strict Kubernetes schema, and that it is daemonset.yaml's DaemonSet
with exactly what process mode adds."""

from __future__ import annotations

import copy

import pytest

from exporter.config import parse_config
from support.deploy_tools import DAEMONSET, REPO_ROOT, find_object, load_documents, validate_strict

VARIANT = REPO_ROOT / "deploy" / "daemonset-process-shares.yaml"
EXPORTER = "pod-gpu-metrics-exporter"
PROCESS_ARGS = ["--sharing.mode=process", "--sharing.proc-root=/proc"]
NVML_ENV = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]


def variant():
    return find_object(load_documents(VARIANT), "DaemonSet")


def base():
    return find_object(load_documents(DAEMONSET), "DaemonSet")


def exporter_container(daemonset):
    return next(c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == EXPORTER)


@pytest.mark.parametrize("version", ["1.30.0", "newest"])
def test_variant_passes_the_strict_kubernetes_schema(version):
    output = validate_strict(VARIANT, version)
    assert output.count(" passed for resource ") == 1, output


def test_variant_is_the_default_daemonset_plus_process_mode_only():
    expected = copy.deepcopy(base())
    spec = expected["spec"]["template"]["spec"]
    spec["hostPID"] = True
    ours = exporter_container(expected)
    ours["args"] = ours["args"] + PROCESS_ARGS
    ours["env"] = ours.get("env", []) + NVML_ENV
    # Anything else that differs (name, service account, probes, restrictions) is drift from daemonset.yaml.
    assert variant() == expected


def test_process_mode_flags_are_accepted_by_the_real_parser():
    config = parse_config(exporter_container(variant())["args"], {})
    assert (config.sharing_mode, config.sharing_proc_root, config.kubernetes_api) == ("process", "/proc", "auto")


def test_the_exporter_stays_unprivileged_and_takes_no_gpu():
    container = exporter_container(variant())
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True and security["capabilities"] == {"drop": ["ALL"]}
    assert all(mount["readOnly"] is True for mount in container["volumeMounts"])
    assert "nvidia.com/gpu" not in str(container["resources"])  # NVML through the runtime, no GPU taken away


def test_the_service_account_it_runs_as_may_watch_pods():
    docs = load_documents(DAEMONSET)
    account = variant()["spec"]["template"]["spec"]["serviceAccountName"]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding"
                   and {"kind": "ServiceAccount", "name": account, "namespace": variant()["metadata"]["namespace"]}
                   in d["subjects"])
    role = find_object(docs, "ClusterRole", binding["roleRef"]["name"])
    pods = [rule for rule in role["rules"] if rule["apiGroups"] == [""] and "pods" in rule["resources"]]
    assert pods and {"list", "watch"} <= set(pods[0]["verbs"])
