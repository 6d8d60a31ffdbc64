"""The chart's monitoring objects (PrometheusRule from prometheus/rules/, dashboards from prometheus/grafana/,
ServiceMonitor, PodMonitor), its NOTES, and the raw manifests as renderings of it (scripts/render_manifests.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from support.deploy_tools import DASHBOARD, PROMETHEUS_DIR, REPO_ROOT, SHIPPED_RULE_FILES, core_schema_errors
from support.helm_tools import CHART, RENDER, objects, render, require_helm, run_helm
from support.promtool_tests import run_promtool

MONITORING = "monitoring-values.yaml"


def _rule():
    (rule,) = objects(render(MONITORING), "PrometheusRule")
    return rule


def test_rule_groups_are_the_rule_files_groups():
    expected = [group for path in SHIPPED_RULE_FILES.values() for group in yaml.safe_load(path.read_text())["groups"]]
    assert _rule()["spec"]["groups"] == expected
    assert {"release": "prometheus"}.items() <= _rule()["metadata"]["labels"].items()


def test_rendered_rules_pass_promtool_check_and_the_projects_rule_tests(tmp_path):
    rules = tmp_path / "rendered.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": _rule()["spec"]["groups"]}, sort_keys=False))
    result = run_promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr
    for test_file in sorted((PROMETHEUS_DIR / "rules").glob("*.rules.test.yml")):
        text = re.sub(r"(?m)^rule_files:\n(?:  - .*\n)+", "rule_files:\n  - rendered.rules.yml\n", test_file.read_text())
        (tmp_path / test_file.name).write_text(text)
        result = run_promtool("test", "rules", str(tmp_path / test_file.name))
        assert result.returncode == 0, f"{test_file.name}: {result.stdout}{result.stderr}"


def test_a_changed_rule_file_changes_the_rendering(tmp_path):
    # Proves the equality above reads the files (not a copy): the chart rendered with a rule file edited.
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart, symlinks=False)
    path = chart / "files" / "rules" / "pod-gpu-metrics.rules.yml"
    path.write_text(path.read_text().replace("namespace_pod:DCGM_FI_DEV_GPU_UTIL:avg", "changed:avg", 1))
    text = run_helm("template", "x", str(chart), "--set", "prometheusRule.enabled=true",
                    "--api-versions", "monitoring.coreos.com/v1").stdout
    (rule,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] != _rule()["spec"]["groups"]


def test_dashboards_configmap_is_the_grafana_folder():
    (configmap,) = objects(render(MONITORING), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    files = {path.name: path.read_text() for path in sorted((PROMETHEUS_DIR / "grafana").glob("*.json"))}
    assert configmap["data"] == files and DASHBOARD.name in files
    json.loads(configmap["data"][DASHBOARD.name])


def test_monitoring_objects_are_off_by_default():
    kinds = {d["kind"] for d in render()}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap", "Service", "NetworkPolicy"}


@pytest.mark.parametrize("values, kind", [(MONITORING, "PodMonitor"), ("tls-basic-auth-values.yaml", "ServiceMonitor")])
def test_monitors_checked_as_far_as_the_tools_can(values, kind):
    (monitor,) = objects(render(values), kind)
    assert core_schema_errors("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", monitor["metadata"]) == []
    assert core_schema_errors("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", monitor["spec"]["selector"]) == []
    endpoints_key = "podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"
    # The rest against the field names of prometheus-operator's monitoring.coreos.com/v1 CRDs.
    assert set(monitor["spec"]) <= {"selector", "namespaceSelector", endpoints_key, "jobLabel", "sampleLimit"}
    for endpoint in monitor["spec"][endpoints_key]:
        assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels", "relabelings",
                                 "metricRelabelings", "tlsConfig", "basicAuth"}
        assert endpoint["path"] == "/gpu/metrics" and endpoint["honorLabels"] is True
        for relabeling in endpoint["relabelings"]:
            assert set(relabeling) <= {"sourceLabels", "separator", "targetLabel", "regex", "replacement", "action"}


# --- NOTES.txt ---

def _notes(*args):
    done = run_helm("install", "pod-gpu-metrics-exporter", str(CHART), "--namespace", "gpu-monitoring",
                    "--dry-run=client", *args)
    return done.stdout.split("NOTES:", 1)[1]


def test_notes_say_where_the_metrics_are_and_how_to_check():
    notes = _notes()
    assert "http://<pod IP>:9400/gpu/metrics" in notes
    assert re.search(r"(?m)kubectl exec -n gpu-monitoring <pod> -c pod-gpu-metrics-exporter -- pod-gpu-metrics-exporter mapping$", notes)
    assert "kubectl port-forward -n gpu-monitoring" in notes and "pod_gpu_exporter_(dcgm|kubelet)_up" in notes
    tls = _notes("--values", str(CHART / "ci" / "tls-basic-auth-values.yaml"))
    assert "https://<pod IP>:9400/gpu/metrics" in tls and "curl -sk https://" in tls and "-u <user>:<password>" in tls
    assert "reading the GPU operator's dcgm-exporter" in _notes("--set", "gpuOperator.enabled=true")


def test_notes_follow_the_port_and_path():
    notes = _notes("--set", "web.port=9500", "--set", "web.telemetryPath=/node/gpu")
    assert "http://<pod IP>:9500/node/gpu" in notes and "<pod> 9500:9500 &" in notes
    assert "http://127.0.0.1:9500/node/gpu |" in notes and "9400" not in notes
    assert "--exporter.port 9500 --exporter.path /node/gpu" in notes  # kubectl gpu top's pod proxy
    assert "--exporter.port" not in _notes()


# --- the raw manifests are renderings of the chart ---

def test_raw_manifests_are_fresh_renderings():
    done = subprocess.run([sys.executable, "scripts/render_manifests.py", "--check"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, env=_helm_env())
    assert done.returncode == 0, done.stderr


def test_check_names_a_file_that_differs(tmp_path):
    for manifest in RENDER.MANIFESTS:
        (tmp_path / manifest.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / manifest.path, tmp_path / manifest.path)
    edited = tmp_path / "deploy" / "gpu-operator.yaml"
    edited.write_text(edited.read_text().replace("internalTrafficPolicy: Local", "internalTrafficPolicy: Cluster"))
    done = subprocess.run([sys.executable, "scripts/render_manifests.py", "--check", "--root", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=_helm_env())
    assert done.returncode == 1 and "deploy/gpu-operator.yaml differs" in done.stderr, done.stderr
    assert "daemonset.yaml differs" not in done.stderr.replace("deploy/daemonset-process-shares.yaml", "")


def test_raw_daemonset_keeps_its_namespace_for_a_one_command_install():
    docs = [d for d in yaml.safe_load_all((REPO_ROOT / "daemonset.yaml").read_text()) if d]
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == "gpu-monitoring"
    assert {d["metadata"].get("namespace", "gpu-monitoring") for d in docs[1:] if d["kind"] != "ClusterRole"
            and d["kind"] != "ClusterRoleBinding"} == {"gpu-monitoring"}


def _helm_env():
    import os

    return {**os.environ, "HELM": require_helm()}
