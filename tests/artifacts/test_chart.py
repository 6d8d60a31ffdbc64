"""charts/pod-gpu-metrics-exporter with the real helm: lint, every shape's rendering against the strict
Kubernetes schema, selectors against the labels they must reach, RBAC per feature, hardening, the schema."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.deploy_tools import EXPORTER_RULES, QUEUE_RULES, REPO_ROOT, missing_tool
from support.helm_tools import CHART, CI_VALUES, NAMESPACE, load_chart_file, objects, render, run_helm, shape_names
from support.node_scheduling import selects as _selects

OLDEST_SUPPORTED = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
OPERATOR_FIXTURES = REPO_ROOT / "tests" / "data" / "gpu-operator"
EXPORTER = "pod-gpu-metrics-exporter"


def _pods(docs):
    """Each DaemonSet's pod template, with its namespace."""
    return [(d["metadata"]["namespace"], d["spec"]["template"]) for d in objects(docs, "DaemonSet")]


def _exporter(template):
    return next(c for c in template["spec"]["containers"] if c["name"] == EXPORTER)


def _is_amd(template):
    return "--gpu.vendor=amd" in _exporter(template)["args"]


# The host folders each vendor's pods read, read-only: the kubelet's pod-resources everywhere; on AMD
# nodes also the folder of AMD's identity socket and the node's /sys.
HOST_PATHS = {False: ["/var/lib/kubelet/pod-resources"],
              True: ["/var/lib/kubelet/pod-resources", "/var/lib/amd-metrics-exporter", "/sys"]}
GPU_TAINT = {False: "nvidia.com/gpu", True: "amd.com/gpu"}


def _grants(docs):
    grants = {}
    for role in objects(docs, "ClusterRole"):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


# --- Chart.yaml and helm lint ---

def test_chart_metadata_follows_the_package():
    chart = load_chart_file("Chart.yaml")
    version = re.search(r'(?m)^version = "([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text()).group(1)
    assert chart["apiVersion"] == "v2" and chart["name"] == EXPORTER
    assert chart["version"] == chart["appVersion"] == version
    assert chart["kubeVersion"] == f">={OLDEST_SUPPORTED}-0"
    assert chart["home"].startswith("https://") and all(s.startswith("https://") for s in chart["sources"])


@pytest.mark.parametrize("values", [None, *shape_names()])
def test_helm_lint_strict(values):
    args = ["lint", "--strict", str(CHART)] + (["--values", str(CHART / "ci" / values)] if values else [])
    done = run_helm(*args, check=False)
    assert done.returncode == 0 and "0 chart(s) failed" in done.stdout, done.stdout + done.stderr


def test_lint_fails_on_a_broken_template(tmp_path):
    # Proves the lint above can fail: the chart with one template cut short.
    broken = tmp_path / "chart"
    subprocess.run(["cp", "-rL", str(CHART), str(broken)], check=True)
    path = broken / "templates" / "service.yaml"
    path.write_text(path.read_text().replace("{{- end }}", "", 1))
    assert run_helm("lint", "--strict", str(broken), check=False).returncode != 0


# --- every shape against the strict Kubernetes schema, oldest and newest ---

def _kubernetes_validate(version, path):
    try:
        import kubernetes_validate.utils as kv_utils
    except ImportError:
        missing_tool("kubernetes-validate", "pip install kubernetes-validate (the test extra has it)")
    version = kv_utils.latest_version() if version == "newest" else version
    return subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", version, str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, "newest"])
@pytest.mark.parametrize("values", shape_names())
def test_every_shape_passes_the_strict_kubernetes_schema(values, version, tmp_path):
    docs = [d for d in render(values) if d["kind"] not in CRD_KINDS]  # no schema for CRDs: test_chart_monitoring
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = _kubernetes_validate(version, path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARN" not in result.stdout, result.stdout
    assert result.stdout.count(" passed for resource ") == len(docs), result.stdout


def test_the_chart_creates_no_namespace():
    for values in shape_names():
        assert not objects(render(values), "Namespace"), values


# --- selectors reach what they must ---

@pytest.mark.parametrize("values", shape_names())
def test_every_selector_matches_the_pods_it_must_reach(values):
    docs = render(values)
    pods = _pods(docs)
    assert pods
    for daemonset in objects(docs, "DaemonSet"):
        assert _selects(daemonset["spec"]["selector"]["matchLabels"], daemonset["spec"]["template"]["metadata"]["labels"])
        # The top command finds the exporter pods by this label; every scrape config keys on it.
        assert daemonset["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == EXPORTER
        ports = {p["name"]: p["containerPort"] for p in _exporter(daemonset["spec"]["template"])["ports"]}
        assert ports == {"metrics": 9400}
    # No DaemonSet selects another's pods: each owns its own.
    for daemonset in objects(docs, "DaemonSet"):
        owned = [t for _, t in pods if _selects(daemonset["spec"]["selector"]["matchLabels"], t["metadata"]["labels"])]
        assert len(owned) == 1
    ours = [s for s in objects(docs, "Service") if s["metadata"]["namespace"] == NAMESPACE]
    for service in ours:
        assert all(_selects(service["spec"]["selector"], t["metadata"]["labels"]) for _, t in pods)
        assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    for monitor in objects(docs, "ServiceMonitor"):
        assert [s for s in ours if _selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for s in ours for p in s["spec"]["ports"]}
    for monitor in objects(docs, "PodMonitor"):
        assert all(_selects(monitor["spec"]["selector"]["matchLabels"], t["metadata"]["labels"]) for _, t in pods)
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    for policy in objects(docs, "NetworkPolicy"):
        assert all(_selects(policy["spec"]["podSelector"]["matchLabels"], t["metadata"]["labels"]) for _, t in pods)
        assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == ["metrics"]
    for binding in objects(docs, "ClusterRoleBinding"):
        for _, template in pods:
            assert {"kind": "ServiceAccount", "name": template["spec"]["serviceAccountName"],
                    "namespace": NAMESPACE} in binding["subjects"]


@pytest.mark.parametrize("values, operands", [("gpu-operator-values.yaml", ["classic", "dra"]),
                                              ("gpu-operator-classic-values.yaml", ["classic"]),
                                              ("gpu-operator-dra-values.yaml", ["dra"])])
def test_operator_shapes_reach_the_operand_on_their_node(values, operands):
    docs = render(values)
    fixtures = {"classic": "nvidia-dcgm-exporter.yaml", "dra": "nvidia-dcgm-exporter-dra.yaml"}
    local = [s for s in objects(docs, "Service") if s["metadata"]["namespace"] == "gpu-operator"]
    assert len(local) == len(operands) == len(objects(docs, "DaemonSet"))
    for operand in operands:
        theirs = next(d for d in yaml.safe_load_all((OPERATOR_FIXTURES / fixtures[operand]).read_text())
                      if d["kind"] == "DaemonSet")["spec"]["template"]
        (service,) = [s for s in local if _selects(s["spec"]["selector"], theirs["metadata"]["labels"])]
        assert service["spec"]["internalTrafficPolicy"] == "Local"
        (daemonset,) = [d for d in objects(docs, "DaemonSet")
                        if _selects(d["spec"]["template"]["spec"]["nodeSelector"], theirs["spec"]["nodeSelector"])]
        template = daemonset["spec"]["template"]
        assert [c["name"] for c in template["spec"]["containers"]] == [EXPORTER]  # never a second dcgm-exporter
        url = f"--dcgm.url=http://{service['metadata']['name']}.gpu-operator.svc:9400/metrics"
        assert url in _exporter(template)["args"]
        # The API context, as in every cluster shape: the token in the exporter's container, no api=off.
        mounts = {m["mountPath"] for m in _exporter(template)["volumeMounts"]}
        assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
        assert not [a for a in _exporter(template)["args"] if a.startswith("--kubernetes.api")]
    assert _grants(docs) == EXPORTER_RULES


def test_the_operator_shape_never_runs_dcgm_exporter_even_if_asked():
    docs = render("gpu-operator-values.yaml", "--set", "dcgmExporter.enabled=true")
    assert all(len(t["spec"]["containers"]) == 1 for _, t in _pods(docs))


# --- RBAC: only what the enabled features read ---

def test_default_rbac_is_exactly_the_api_contexts_reads():
    assert _grants(render()) == EXPORTER_RULES


def test_queue_labels_add_the_queue_reads():
    assert _grants(render("api-queue-values.yaml")) == {**EXPORTER_RULES, **QUEUE_RULES}


def test_without_the_api_context_there_is_no_rbac_and_no_token():
    docs = render("default-values.yaml", "--set", "kubernetes.enabled=false")
    assert not objects(docs, "ClusterRole") and not objects(docs, "ClusterRoleBinding")
    ((_, template),) = _pods(docs)
    assert "--kubernetes.api=off" in _exporter(template)["args"]
    assert not [v for v in template["spec"]["volumes"] if "projected" in v]
    assert template["spec"]["automountServiceAccountToken"] is False


def test_rbac_is_read_only_in_every_shape():
    for values in shape_names():
        for verbs in _grants(render(values)).values():
            assert verbs <= {"get", "list", "watch"}, values


def test_top_access_is_a_namespaced_role_bound_only_to_the_named_subjects():
    assert not objects(render(), "Role")
    docs = render("monitoring-values.yaml")
    (role,) = objects(docs, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                             {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}]
    (binding,) = objects(docs, "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "Group", "name": "gpu-users", "apiGroup": "rbac.authorization.k8s.io"}]
    assert not objects(render("default-values.yaml", "--set", "top.rbac.create=true"), "RoleBinding")


# --- hardening, in every shape ---

@pytest.mark.parametrize("values", shape_names())
def test_every_shape_is_hardened(values):
    for _, template in _pods(render(values)):
        spec = template["spec"]
        security = _exporter(template)["securityContext"]
        assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True and security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["priorityClassName"] == "system-node-critical"
        amd = _is_amd(template)
        assert any(t["key"] == GPU_TAINT[amd] and t["operator"] == "Exists" and "effect" not in t
                   for t in spec["tolerations"])
        host_paths = [v for v in spec["volumes"] if "hostPath" in v]
        assert [v["hostPath"]["path"] for v in host_paths] == HOST_PATHS[amd]
        mounts = [m for c in spec["containers"] for m in c.get("volumeMounts", [])]
        assert all(m["readOnly"] is True for m in mounts)
        # The host's PIDs only where process shares need them.
        assert spec.get("hostPID", False) is (values == "process-shares-values.yaml")
        assert spec.get("hostNetwork", False) is False
        for container in spec["containers"]:
            assert {"cpu", "memory"} <= set(container["resources"]["requests"]) <= set(container["resources"]["limits"])


def test_process_mode_without_host_pid_reads_the_hosts_proc_read_only():
    ((_, template),) = _pods(render("process-shares-values.yaml", "--set", "sharing.hostProc=true"))
    spec, container = template["spec"], _exporter(template)
    assert spec.get("hostPID", False) is False
    assert "--sharing.proc-root=/host/proc" in container["args"]
    (volume,) = [v for v in spec["volumes"] if v.get("hostPath", {}).get("path") == "/proc"]
    assert {"name": volume["name"], "mountPath": "/host/proc", "readOnly": True} in container["volumeMounts"]
    # Only in process mode.
    ((_, default),) = _pods(render("default-values.yaml", "--set", "sharing.hostProc=true"))
    assert [v["hostPath"]["path"] for v in default["spec"]["volumes"] if "hostPath" in v] == ["/var/lib/kubelet/pod-resources"]


def test_resources_cover_the_measured_memory():
    # docs/performance.md's goals: peak RSS at 6,400 and 25,600 series. The request holds the
    # common case, the limit twice the large one.
    text = (REPO_ROOT / "docs" / "performance.md").read_text()
    small, large = map(int, re.search(r"peak RSS ≤ (\d+) MiB at 6,400, ≤ (\d+) MiB at 25,600", text).groups())
    resources = load_chart_file("values.yaml")["resources"]
    mib = lambda quantity: int(quantity.removesuffix("Mi"))  # noqa: E731
    assert mib(resources["requests"]["memory"]) >= small
    assert mib(resources["limits"]["memory"]) >= 2 * large


def test_tls_shape_probes_over_https_with_the_web_config_from_the_secret():
    docs = render("tls-basic-auth-values.yaml")
    ((_, template),) = _pods(docs)
    container = _exporter(template)
    assert "--web.config.file=/etc/pod-gpu-metrics-exporter/web/web-config.yml" in container["args"]
    assert container["livenessProbe"]["httpGet"]["scheme"] == container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (volume,) = [v for v in template["spec"]["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "pod-gpu-metrics-exporter-web"
    assert {"name": volume["name"], "mountPath": "/etc/pod-gpu-metrics-exporter/web", "readOnly": True} in container["volumeMounts"]
    (endpoint,) = objects(docs, "ServiceMonitor")[0]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] and endpoint["basicAuth"]


def test_config_sets_any_flag_and_the_real_parser_takes_every_shapes_args():
    from exporter.config import parse_config

    for values in shape_names():
        for _, template in _pods(render(values)):
            parse_config(_exporter(template)["args"], {})  # raises (exit 2) on a flag it does not know
    args = _exporter(_pods(render("default-values.yaml", "--set", "config.labels\\.mode=join"))[0][1])["args"]
    assert "--labels.mode=join" in args


# --- the port and telemetry path: values every object follows ---

MOVED = ("--set", "web.port=9500", "--set", "web.telemetryPath=/node/gpu", "--set", "serviceMonitor.enabled=true")


@pytest.mark.parametrize("values", ["monitoring-values.yaml", "gpu-operator-values.yaml", "tls-basic-auth-values.yaml"])
def test_port_and_path_are_values_that_every_object_follows(values):
    from exporter.config import parse_config

    docs = render(values, *MOVED)
    for namespace, template in _pods(docs):
        container = _exporter(template)
        config = parse_config(container["args"], {})  # what the real exporter will listen on
        assert (config.listen_host, config.listen_port, config.telemetry_path) == ("", 9500, "/node/gpu")
        assert container["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["port"] == "metrics"
        annotations = template["metadata"]["annotations"]
        assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == ("9500", "/node/gpu")
    (service,) = [s for s in objects(docs, "Service") if s["metadata"]["namespace"] == NAMESPACE]
    assert service["spec"]["ports"][0]["port"] == 9500 and service["spec"]["ports"][0]["targetPort"] == "metrics"
    monitors = objects(docs, "ServiceMonitor") + objects(docs, "PodMonitor")
    endpoints = [e for m in monitors for e in m["spec"].get("endpoints", []) + m["spec"].get("podMetricsEndpoints", [])]
    assert endpoints and {(e["port"], e["path"]) for e in endpoints} == {("metrics", "/node/gpu")}


def test_a_service_port_of_its_own_still_reaches_the_moved_port():
    (service,) = objects(render("monitoring-values.yaml", *MOVED, "--set", "service.port=80"), "Service")
    assert service["spec"]["ports"][0]["port"] == 80 and service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_the_charts_defaults_are_the_exporters_and_name_no_flag():
    # The chart passes --web.listen-address and --web.telemetry-path only where they differ from the
    # exporter's own defaults: those must be the values' defaults, or the pod would serve elsewhere.
    from exporter.config import Config

    web = load_chart_file("values.yaml")["web"]
    assert (web["port"], web["telemetryPath"]) == (Config.listen_port, Config.telemetry_path)
    assert Config.listen_host == ""  # every interface: the kubelet's probes and Prometheus reach it
    for values in shape_names():
        for _, template in _pods(render(values)):
            assert not [a for a in _exporter(template)["args"] if a.startswith(("--web.listen", "--web.telemetry"))]


@pytest.mark.parametrize("setting, value", [
    ("config.web\\.listen-address=:9500", "web.port"),
    ("config.web\\.telemetry-path=/metrics2", "web.telemetryPath"),
    ("extraArgs={--web.listen-address=:9500}", "web.port"),
    ("extraArgs={--web.telemetry-path=/metrics2}", "web.telemetryPath"),
])
def test_the_same_flags_through_config_or_extra_args_are_refused_naming_the_value(setting, value):
    # Set there, they would move the listener alone: probes, Service and monitors left on the old port or path.
    done = run_helm("template", "x", str(CHART), "--set", setting, check=False)
    flag = setting.split("=")[0].replace("config.", "").replace("\\", "").replace("extraArgs={--", "")
    assert done.returncode != 0, "rendered a pod whose probes or scrapes miss the exporter"
    assert f"{flag}" in done.stderr and f"set {value} instead" in done.stderr, done.stderr


# --- values.schema.json refuses bad values ---

@pytest.mark.parametrize("setting, message", [
    ("sharing.mode=processes", "value must be one of 'device', 'process'"),
    ("gpuOperator.dcgmExporter=gpucluster", "value must be one of 'auto', 'classic', 'dra'"),
    ("gpuOperator.enabled=yes", "got string, want boolean"),
    ("resources=big", "got string, want object"),
    ("replicas=3", "additional properties 'replicas' not allowed"),
    ("serviceMonitor.interval=often", "does not match pattern"),
    ("web.port=70000", "maximum: got 70,000, want 65,535"),
    ("web.port=9401", "web.port 9401 is the port of dcgmExporter.listenAddress (127.0.0.1:9401)"),
    ("web.telemetryPath=metrics", "does not match pattern"),
    ("web.telemetryPath=/healthz", "web.telemetryPath /healthz is a route the exporter serves itself"),
])
def test_the_schema_refuses_bad_values(setting, message):
    done = run_helm("template", "x", str(CHART), "--set", setting, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_the_schema_allows_global_and_every_ci_shape():
    run_helm("template", "x", str(CHART), "--set", "global.imageRegistry=example.com")
    for path in CI_VALUES:
        run_helm("template", "x", str(CHART), "--values", str(path))


def test_every_value_key_carries_a_comment():
    keys = _schema_keys(load_chart_file("values.schema.json"))
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack, seen = [], set()
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w.-]*):", line)
        if not match or line.lstrip().startswith(("#", "-")):
            continue
        indent = len(match.group(1))
        stack = [(i, k) for i, k in stack if i < indent] + [(indent, match.group(2))]
        path = ".".join(k for _, k in stack)
        if path not in keys:
            continue  # inside a free-form map (resources, config...): its parent carries the comment
        seen.add(path)
        above = lines[number - 1].strip() if number else ""
        assert above.startswith("#") or "#" in line.split(":", 1)[1], f"values.yaml: {path} has no comment"
    assert seen == keys


def _schema_keys(schema, prefix=""):
    keys = set()
    for name, sub in schema.get("properties", {}).items():
        keys.add(prefix + name)
        keys |= _schema_keys(sub, prefix + name + ".")
    return keys


def test_chart_files_link_to_the_single_sources():
    assert (CHART / "files" / "rules").resolve() == (REPO_ROOT / "prometheus" / "rules").resolve()
    assert (CHART / "files" / "grafana").resolve() == (REPO_ROOT / "prometheus" / "grafana").resolve()
    assert Path(CHART / "files" / "rules").is_symlink() and Path(CHART / "files" / "grafana").is_symlink()
