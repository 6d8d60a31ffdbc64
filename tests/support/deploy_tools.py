"""Shared helpers of the deployment tests: repository paths, YAML loading, and finding the real tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = REPO_ROOT / "daemonset.yaml"
PROMETHEUS_DIR = REPO_ROOT / "prometheus"
CONFIGMAP = PROMETHEUS_DIR / "prometheus-configmap.yaml"
DEPLOYMENT = PROMETHEUS_DIR / "prometheus-deployment.yaml"
PODMONITOR = PROMETHEUS_DIR / "operator" / "podmonitor.yaml"
RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-metrics.rules.yml"
RULES_TESTS = PROMETHEUS_DIR / "rules" / "pod-gpu-metrics.rules.test.yml"
DASHBOARD = PROMETHEUS_DIR / "grafana" / "grafana-dashboard.json"
# Every rule file prometheus/rules/ ships (its promtool tests aside), by its key in the ConfigMap.
SHIPPED_RULE_FILES = {path.name: path for path in sorted((PROMETHEUS_DIR / "rules").glob("*.rules.yml"))}

# --- Kubernetes API access (--kubernetes.api): least-privilege RBAC ---
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
    # A claim its pods hold: one get each, by name (collectors/kubernetes/dra), never listed or watched.
    ("resource.k8s.io", "resourceclaims"): {"get"},
    # DeviceTaintRules: their taints join the ResourceSlices' own (cluster-scoped, watched).
    ("resource.k8s.io", "devicetaintrules"): {"list", "watch"},
}
# Only where --labels.extra has queue (the chart's api-queue shape; tests/artifacts/test_chart.py):
# a pod's Kueue LocalQueue and Volcano PodGroup, one get each; KAI Scheduler's Queues, watched.
QUEUE_RULES = {
    ("kueue.x-k8s.io", "localqueues"): {"get"},
    ("scheduling.volcano.sh", "podgroups"): {"get"},
    ("scheduling.run.ai", "queues"): {"get"},
}


def missing_tool(what: str, how_to_install: str) -> None:
    """Skip on a developer machine, fail in CI: a check CI cannot run must not pass quietly."""
    message = f"{what} is not available; {how_to_install}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so this is a failure, not a skip)")
    pytest.skip(message)


def require_executable(name: str, how_to_install: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_tool(f"`{name}`", how_to_install)
    return path


def require_env_executable(variable: str, how_to_install: str) -> str:
    path: str | None = os.environ.get(variable)
    if not path:
        missing_tool(f"${variable}", how_to_install)
    if not os.access(path, os.X_OK):
        pytest.fail(f"${variable}={path} is not an executable file; {how_to_install}")
    return path


def validate_strict(path: Path, version: str) -> str:
    """kubernetes-validate --strict of one file against a Kubernetes version ("newest": the newest
    its schemas know); checks it passed without warnings and returns what it printed."""
    try:
        import kubernetes_validate.utils as kv_utils
    except ImportError:
        missing_tool("kubernetes-validate", "pip install kubernetes-validate (the test extra has it)")
    if version == "newest":
        version = kv_utils.latest_version()
    result = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARN" not in result.stdout, result.stdout
    return result.stdout


def load_documents(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def find_object(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected exactly one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def configmap_data() -> dict[str, str]:
    return find_object(load_documents(CONFIGMAP), "ConfigMap")["data"]


def cluster_role_grants(shape: str | None = None):
    """(API group, resource) → verbs of the exporter's ClusterRole: daemonset.yaml's, or that of one of the
    chart's ci/ shapes (e.g. "api-queue-values.yaml", rendered by the real helm)."""
    if shape is None:
        docs = load_documents(DAEMONSET)
    else:
        from support.helm_tools import render

        docs = render(shape)
    role = find_object(docs, "ClusterRole")
    grants = {}
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def core_schema_errors(definition: str, value, version: str = "1.30.0") -> list:
    """Errors of `value` against one definition of kubernetes-validate's strict schemas (e.g. ObjectMeta), for
    the parts of a custom resource that borrow core types."""
    from importlib.resources import files

    import jsonschema
    from referencing import Registry, Resource

    folder = f"v{version}-local-strict"
    text = files("kubernetes_validate").joinpath("kubernetes-json-schema", folder, "_definitions.json").read_text()
    definitions = json.loads(text)
    registry = Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))
    schema = {"$ref": f"{definitions['$id']}#/$defs/{definition}"}
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [e.message for e in validator.iter_errors(value)]


def dashboard() -> dict:
    """The shipped Grafana dashboard."""
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def dashboard_targets() -> list:
    """(panel title, target) of every panel's query, rows' nested panels included."""
    panels = list(dashboard()["panels"])
    panels += [inner for panel in panels for inner in panel.get("panels", [])]
    return [(panel["title"], target) for panel in panels for target in panel.get("targets", [])]
