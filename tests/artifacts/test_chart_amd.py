"""The chart on AMD GPU nodes, with the real helm: alone (amd), beside NVIDIA's DaemonSet (mixed) and not at
all (default, byte for byte what it was); the AMD pods' flags against the exporter's own flag table, their
mounts, their node-local Service, and that no node ever gets two exporters."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from support.helm_tools import CHART, NAMESPACE, load_chart_file, objects, render, render_text, run_helm
from support.node_scheduling import daemonsets_on, selects

EXPORTER = "pod-gpu-metrics-exporter"
AMD_DAEMONSET = f"{EXPORTER}-amd"
AMD_SERVICE = f"{EXPORTER}-amd-metrics-local"
SOCKET = "/var/lib/amd-metrics-exporter/amdgpu_device_metrics_exporter_grpc.socket"
SERVICE_URL = f"http://{AMD_SERVICE}.kube-amd-gpu.svc:5000/metrics"

NVIDIA_NODE = {"nvidia.com/gpu.present": "true"}
AMD_NODE = {"feature.node.kubernetes.io/amd-gpu": "true"}
CLASSIC_NODE = {**NVIDIA_NODE, "nvidia.com/gpu.deploy.dcgm-exporter": "true"}
DRA_NODE = {**NVIDIA_NODE, "nvidia.com/gpu.deploy.dcgm-exporter-dra": "true"}
NODES = {"cpu only": {}, "nvidia": NVIDIA_NODE, "amd": AMD_NODE, "nvidia and amd": {**NVIDIA_NODE, **AMD_NODE},
         "operator classic": CLASSIC_NODE, "operator dra": DRA_NODE, "operator classic and amd": {**CLASSIC_NODE, **AMD_NODE},
         "amd, operator labels left behind": {**AMD_NODE, "nvidia.com/gpu.deploy.dcgm-exporter": "true",
                                              "nvidia.com/gpu.deploy.dcgm-exporter-dra": "true"}}


def _daemonset(docs, name):
    (daemonset,) = [d for d in objects(docs, "DaemonSet") if d["metadata"]["name"] == name]
    return daemonset


def _container(daemonset):
    return next(c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == EXPORTER)


def _flags(container):
    return dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])


def _documents(text):
    """helm's output, one string per object, `# Source:` line included."""
    return [part.strip("\n") for part in text.split("\n---\n") if part.strip("\n-")]


# --- NVIDIA's rendering stays what it was ---

def test_amd_values_change_nothing_while_amd_is_off():
    changed = ("--set", "amd.metricsExporter.namespace=elsewhere", "--set", "amd.metricsSocket=/run/amd/x.sock",
               "--set", "amd.config.amd\\.timeout=2s", "--set", "amd.nodeSelector.pool=amd")
    assert render_text("default-values.yaml", *changed) == render_text("default-values.yaml")
    assert "amd" not in render_text("default-values.yaml").lower()


@pytest.mark.parametrize("nvidia_shape", ["default-values.yaml", "gpu-operator-values.yaml", "process-shares-values.yaml"])
def test_beside_amd_every_nvidia_object_is_byte_for_byte_the_nvidia_only_one(nvidia_shape):
    # The AMD part only adds objects: the NVIDIA DaemonSets, RBAC and Services render exactly as without it.
    alone = _documents(render_text(nvidia_shape))
    mixed = _documents(render_text(nvidia_shape, "--set", "amd.enabled=true"))
    assert [doc for doc in mixed if doc not in alone] and all(doc in mixed for doc in alone)
    added = [doc for doc in mixed if doc not in alone]
    assert [re.search(r"(?m)^kind: (\w+)", doc).group(1) for doc in added] == ["Service", "DaemonSet"]


# --- AMD alone ---

def test_amd_alone_runs_no_nvidia_part_whatever_the_nvidia_values_say():
    docs = render("amd-values.yaml", "--set", "gpuOperator.enabled=true", "--set", "dcgmExporter.enabled=true")
    assert [d["metadata"]["name"] for d in objects(docs, "DaemonSet")] == [AMD_DAEMONSET]
    assert [(s["metadata"]["name"], s["metadata"]["namespace"]) for s in objects(docs, "Service")] == [(AMD_SERVICE, "kube-amd-gpu")]
    assert "dcgm" not in render_text("amd-values.yaml")


def test_neither_vendor_is_refused_in_one_line():
    done = run_helm("template", "x", str(CHART), "--set", "nvidia.enabled=false", check=False)
    assert done.returncode != 0 and "nvidia.enabled and amd.enabled are both false" in done.stderr, done.stderr


@pytest.mark.parametrize("shape", ["amd-values.yaml", "mixed-values.yaml"])
def test_the_amd_pods_flags_name_the_node_local_exporter_socket_and_sysfs(shape):
    container = _container(_daemonset(render(shape), AMD_DAEMONSET))
    assert _flags(container) == {
        "amd.metrics-socket": SOCKET,
        "amd.metrics-url": SERVICE_URL,
        "amd.sysfs-root": "/host/sys",
        "gpu.vendor": "amd",
        "kubelet.socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
        "labels.extra": "pod_uid,workload",
    }


def test_the_exporters_flag_parser_takes_the_amd_pods_args():
    # Against the exporter's own flag table: each flag the chart passes must be one the exporter declares, and
    # parse to the value the chart meant. (The AMD flags come with the exporter's AMD support; until they are
    # in exporter/config.py's table this test names the ones missing.)
    from exporter.config import all_flags, parse_config

    args = _container(_daemonset(render("amd-values.yaml"), AMD_DAEMONSET))["args"]
    declared = {flag.flag: flag.field for flag in all_flags()}
    missing = sorted({arg.split("=", 1)[0] for arg in args} - set(declared))
    assert not missing, f"flags the chart passes that the exporter does not declare: {missing}"
    config = parse_config(args, {})
    given = _flags({"args": args})
    for name in ("gpu.vendor", "amd.metrics-url", "amd.metrics-socket", "amd.sysfs-root", "kubelet.socket"):
        assert str(getattr(config, declared[f"--{name}"])) == given[name], name


def test_the_amd_values_default_to_the_exporters_own_defaults():
    # The socket is where the exporter looks by default, and the Service's port is the one of the exporter's
    # default URL (AMD's port). Also needs the exporter's AMD flags.
    from exporter.config import all_flags

    defaults = {flag.flag: flag.default for flag in all_flags()}
    assert {"--amd.metrics-socket", "--amd.metrics-url"} <= set(defaults), "the exporter declares no AMD flags"
    amd = load_chart_file("values.yaml")["amd"]
    assert amd["metricsSocket"] == defaults["--amd.metrics-socket"] == SOCKET
    assert amd["metricsExporter"]["port"] == urlsplit(defaults["--amd.metrics-url"]).port == 5000


def test_the_socket_folder_and_sys_are_mounted_read_only_where_the_flags_say():
    daemonset = _daemonset(render("amd-values.yaml"), AMD_DAEMONSET)
    template, container = daemonset["spec"]["template"], _container(daemonset)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"] for v in template["spec"]["volumes"] if "hostPath" in v}
    flags = _flags(container)
    # The socket's folder at its own path: AMD's exporter makes a new socket in it each time it starts.
    socket_folder = flags["amd.metrics-socket"].rsplit("/", 1)[0]
    (socket_volume,) = [name for name, m in mounts.items() if m["mountPath"] == socket_folder]
    assert host_paths[socket_volume] == {"path": socket_folder, "type": "DirectoryOrCreate"}
    (sys_volume,) = [name for name, m in mounts.items() if m["mountPath"] == flags["amd.sysfs-root"]]
    assert host_paths[sys_volume] == {"path": "/sys", "type": "Directory"}
    assert all(m["readOnly"] is True for m in mounts.values())


def test_a_socket_elsewhere_moves_the_flag_and_the_mount_together():
    container = _container(_daemonset(render("amd-values.yaml", "--set", "amd.metricsSocket=/run/amd/metrics.sock"),
                                      AMD_DAEMONSET))
    assert _flags(container)["amd.metrics-socket"] == "/run/amd/metrics.sock"
    assert "/run/amd" in {m["mountPath"] for m in container["volumeMounts"]}


def test_an_exporter_url_of_its_own_replaces_the_service():
    url = "http://amd-metrics-amd-metrics-exporter-svc.monitoring.svc:5000/metrics"
    docs = render("amd-values.yaml", "--set", f"amd.metricsExporter.url={url}")
    assert not objects(docs, "Service")
    assert _flags(_container(_daemonset(docs, AMD_DAEMONSET)))["amd.metrics-url"] == url


def test_the_node_local_service_follows_the_values():
    docs = render("amd-values.yaml", "--set", "amd.metricsExporter.namespace=amd-monitoring",
                  "--set", "amd.metricsExporter.port=5001",
                  "--set-json", 'amd.metricsExporter.podLabels={"app": "amd-metrics-amdgpu-metrics-exporter"}')
    (service,) = objects(docs, "Service")
    assert service["metadata"]["namespace"] == "amd-monitoring"
    assert service["spec"]["internalTrafficPolicy"] == "Local" and service["spec"]["type"] == "ClusterIP"
    # Helm merges a map given over the default one: the label narrows the selection.
    assert service["spec"]["selector"] == {"app": "amd-metrics-amdgpu-metrics-exporter",
                                           "app.kubernetes.io/name": "metrics-exporter"}
    assert service["spec"]["ports"] == [{"name": "amd-metrics", "port": 5001, "targetPort": 5001, "protocol": "TCP"}]
    url = _flags(_container(_daemonset(docs, AMD_DAEMONSET)))["amd.metrics-url"]
    assert url == f"http://{AMD_SERVICE}.amd-monitoring.svc:5001/metrics"


def test_amd_config_reaches_the_amd_pods_only_and_nvidia_only_settings_stay_off_them():
    docs = render("mixed-values.yaml", "--set", "amd.config.amd\\.timeout=2s", "--set", "config.labels\\.mode=join",
                  "--set", "sharing.mode=process", "--set", "runtimeClassName=nvidia")
    nvidia, amd = _daemonset(docs, EXPORTER), _daemonset(docs, AMD_DAEMONSET)
    assert {"labels.mode": "join", "sharing.mode": "process"}.items() <= _flags(_container(nvidia)).items()
    assert "amd.timeout" not in _flags(_container(nvidia))
    assert {"labels.mode": "join", "amd.timeout": "2s"}.items() <= _flags(_container(amd)).items()
    assert not [name for name in _flags(_container(amd)) if name.startswith("sharing.")]
    spec = amd["spec"]["template"]["spec"]
    assert "hostPID" not in spec and "runtimeClassName" not in spec
    assert nvidia["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in _container(amd)["env"]}


def test_amd_config_null_removes_a_flag_config_sets_on_the_amd_pods_only(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text("amd:\n  enabled: true\n  config:\n    labels.extra: null\n")
    docs = render("default-values.yaml", "--values", str(values))
    assert "labels.extra" in _flags(_container(_daemonset(docs, EXPORTER)))
    assert "labels.extra" not in _flags(_container(_daemonset(docs, AMD_DAEMONSET)))


@pytest.mark.parametrize("setting, message", [
    ("amd.metricsExporter.url=ftp://amd:5000/metrics", "does not match pattern"),
    ("amd.metricsSocket=amdgpu.socket", "does not match pattern"),
    ("amd.metricsSocket=/amdgpu.socket", "does not match pattern"),  # its folder would be the node's /
    ("amd.metricsExporter.port=0", "minimum: got 0, want 1"),
    ("amd.metricsExporter.namespace=Kube_AMD", "does not match pattern"),
    ("amd.nodeSelector=null", "missing property 'nodeSelector'"),
    ("amd.metricsExporter.podLabels=null", "missing property 'podLabels'"),
    ("amd.vendor=amd", "additional properties 'vendor' not allowed"),
    ("nvidia.enabled=no", "got string, want boolean"),
    ("amd.config.web\\.listen-address=:9500", "amd.config.web.listen-address is not allowed: set web.port instead"),
])
def test_bad_amd_values_are_refused(setting, message):
    done = run_helm("template", "x", str(CHART), "--set", "amd.enabled=true", "--set", setting, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


# --- one exporter per node, whatever the cluster holds ---

@pytest.mark.parametrize("extra", [(), ("--set", "gpuOperator.enabled=true"),
                                   ("--set", "gpuOperator.enabled=true", "--set", "gpuOperator.dcgmExporter=classic"),
                                   ("--set", "gpuOperator.enabled=true", "--set", "gpuOperator.dcgmExporter=dra")])
def test_beside_nvidia_no_node_gets_two_exporters_and_amd_nodes_get_theirs(extra):
    daemonsets = objects(render("mixed-values.yaml", *extra), "DaemonSet")
    amd = _daemonset(daemonsets, AMD_DAEMONSET)
    for node, labels in NODES.items():
        assert len(daemonsets_on(daemonsets, labels)) <= 1, node
    assert daemonsets_on(daemonsets, AMD_NODE) == [amd]
    # A node with GPUs of both vendors keeps NVIDIA's exporter (docs/amd.md says so).
    for nvidia in [d for d in daemonsets if d is not amd]:
        both = {**nvidia["spec"]["template"]["spec"]["nodeSelector"], **AMD_NODE}
        assert daemonsets_on(daemonsets, both) == [nvidia]
    assert daemonsets_on(daemonsets, {}) == []


def test_alone_the_amd_daemonset_keeps_to_amd_nodes_and_keeps_no_nvidia_exclusion():
    (daemonset,) = objects(render("amd-values.yaml"), "DaemonSet")
    assert [name for name, labels in NODES.items() if daemonsets_on([daemonset], labels)] == [
        "amd", "nvidia and amd", "operator classic and amd", "amd, operator labels left behind"]
    assert "affinity" not in daemonset["spec"]["template"]["spec"]


def test_the_nvidia_exclusion_joins_every_term_of_the_users_own_affinity():
    affinity = ('affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": ['
                '{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},'
                '{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}]}}}')
    daemonsets = objects(render("mixed-values.yaml", "--set-json", affinity), "DaemonSet")
    for pool in ("a", "b"):
        assert daemonsets_on(daemonsets, {**AMD_NODE, "pool": pool}) == [_daemonset(daemonsets, AMD_DAEMONSET)]
        assert [d["metadata"]["name"] for d in daemonsets_on(daemonsets, {**NVIDIA_NODE, **AMD_NODE, "pool": pool})] == [EXPORTER]
    assert daemonsets_on(daemonsets, {**AMD_NODE, "pool": "c"}) == []


def test_each_daemonset_owns_its_own_pods_and_the_scrape_objects_reach_both():
    docs = render("mixed-values.yaml", "--set", "podMonitor.enabled=true", "--set", "service.enabled=true",
                  "--set", "networkPolicy.enabled=true")
    daemonsets = objects(docs, "DaemonSet")
    templates = [d["spec"]["template"]["metadata"]["labels"] for d in daemonsets]
    for daemonset in daemonsets:
        assert sum(selects(daemonset["spec"]["selector"]["matchLabels"], labels) for labels in templates) == 1
    (service,) = [s for s in objects(docs, "Service") if s["metadata"]["namespace"] == NAMESPACE]
    (monitor,) = objects(docs, "PodMonitor")
    (policy,) = objects(docs, "NetworkPolicy")
    for labels in templates:
        assert labels["app.kubernetes.io/name"] == EXPORTER  # what `kubectl gpu top` finds pods by
        assert selects(service["spec"]["selector"], labels) and selects(monitor["spec"]["selector"]["matchLabels"], labels)
        assert selects(policy["spec"]["podSelector"]["matchLabels"], labels)


# --- NOTES ---

def _notes(*args):
    done = run_helm("install", EXPORTER, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *args)
    return done.stdout.split("NOTES:", 1)[1]


def test_notes_name_the_amd_daemonset_its_exporter_and_its_gauges():
    alone = _notes("--values", str(CHART / "ci" / "amd-values.yaml"))
    assert AMD_DAEMONSET in alone and SERVICE_URL in alone
    assert "grep -E '^pod_gpu_exporter_(upstream|kubelet|amd_identity)_up'" in alone and "dcgm" not in alone
    mixed = _notes("--values", str(CHART / "ci" / "mixed-values.yaml"))
    assert "(dcgm|kubelet)" in mixed and "On AMD nodes grep -E '^pod_gpu_exporter_(upstream|kubelet|amd_identity)_up'" in mixed
    assert "AMD" not in _notes()
