"""What each command really uses, as a newcomer meets it: settings refused or warned about, `--help`'s
defaults, the demo's refresh interval and the mapping command it prints, NVML left alone without MIG."""

from __future__ import annotations

import shlex
import subprocess
import threading

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.exporter_process import REPO_ROOT, exporter_command, exporter_env, start_exporter
from support.kube_e2e import gauge
from support.waiting import wait_until

GPU = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
LABELS_IGNORED = "need the Kubernetes API, which is off"
# Either NVML outcome line names MIG-<uuid> device IDs ("NVML available: MIG-<uuid> …", "MIG-<uuid> … unresolved").
NVML_NOTE = "MIG-<uuid> device IDs"


def run(args, env=None):
    return subprocess.run(exporter_command() + args, capture_output=True, text=True, timeout=60,
                          cwd=str(REPO_ROOT), env=exporter_env(env))


def assert_refused(result, names, command):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{names} is not used by `{command}`" in lines[0], result.stderr


@pytest.mark.parametrize("args, env, names", [
    (["--web.listen-address", "127.0.0.1:0"], None, "--web.listen-address"),
    (["--web.telemetry-path", "/gpu"], None, "--web.telemetry-path"),
    (["--web.config.file", "/etc/web.yml"], None, "--web.config.file"),
    (["--dcgm.url", "http://127.0.0.1:9401/metrics"], None, "--dcgm.url"),
    (["--dcgm.file", "/run/prometheus/dcgm.prom"], None, "--dcgm.file"),
    (["--dcgm.timeout", "2s"], None, "--dcgm.timeout"),
    (["--dcgm.max-body-size", "4MiB"], None, "--dcgm.max-body-size"),
    (["--kubelet.refresh-interval", "10s"], None, "--kubelet.refresh-interval"),
    (["--kubelet.mapping-max-age", "2m"], None, "--kubelet.mapping-max-age"),
    (["--labels.style", "legacy"], None, "--labels.style"),
    (["--sharing.mode", "process"], None, "--sharing.mode"),
    (["--sharing.proc-root", "/host/proc"], None, "--sharing.proc-root"),
])
def test_mapping_refuses_what_only_serving_uses(args, env, names, socket_dir):
    assert_refused(run(["mapping", "--kubelet.socket", str(socket_dir / "k.sock")] + args, env), names, "mapping")


def test_mapping_runs_in_a_serving_containers_environment(kubelet):
    """`kubectl exec … mapping` inherits the variables the container serves with; they are not refused."""
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", GPU)])
    env = {"POD_GPU_EXPORTER_WEB_LISTEN_ADDRESS": ":9500", "POD_GPU_EXPORTER_DCGM_URL": "http://127.0.0.1:9401/metrics",
           "POD_GPU_EXPORTER_LABELS_STYLE": "legacy", "POD_GPU_EXPORTER_SHARING_MODE": "process",
           "POD_GPU_EXPORTER_KUBERNETES_API": "off"}
    result = run(["mapping", "--kubelet.socket", kubelet.socket_path], env)
    assert result.returncode == 0, result.stderr
    assert "trainer" in result.stdout


def test_mapping_takes_what_it_uses(kubelet):
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", GPU)])
    result = run(["mapping", "-o", "json", "--kubelet.socket", kubelet.socket_path, "--kubelet.timeout", "3s",
                  "--kubernetes.api", "off", "--kubernetes.node-name", "n1", "--log.level", "debug",
                  "--log.format", "json"])
    assert result.returncode == 0 and '"pod": "trainer"' in result.stdout, result.stderr


@pytest.mark.parametrize("args, env, names", [
    (["--kubernetes.api", "on"], None, "--kubernetes.api"),
    (["--kubernetes.kubeconfig", "/root/.kube/config"], None, "--kubernetes.kubeconfig"),
    (["--kubernetes.node-name", "n1"], None, "--kubernetes.node-name"),
    (["--labels.pod-labels", "team"], None, "--labels.pod-labels"),
    (["--labels.pod-annotations", "owner"], None, "--labels.pod-annotations"),
    ([], {"POD_GPU_EXPORTER_KUBERNETES_API": "auto"}, "POD_GPU_EXPORTER_KUBERNETES_API"),
])
def test_demo_refuses_the_kubernetes_api_settings(args, env, names):
    assert_refused(run(["demo", "--web.listen-address", "127.0.0.1:0"] + args, env), names, "demo")


@pytest.mark.parametrize("api, args, env", [
    ("off", ["--labels.extra", "pod_uid"], None),
    ("off", [], {"POD_GPU_EXPORTER_LABELS_POD_LABELS": "team"}),
    ("auto", ["--labels.pod-annotations", "owner"], None),  # auto, outside a pod and without a kubeconfig
])
def test_label_flags_without_the_api_are_warned_about_once(api, args, env, kubelet, dcgm, run_exporter):
    exporter = run_exporter(["--kubernetes.api", api, "--dcgm.url", dcgm.url, "--kubelet.socket",
                             kubelet.socket_path] + args, env=env)
    warnings = [line for line in exporter.stderr_text().splitlines() if LABELS_IGNORED in line]
    assert len(warnings) == 1 and "level=warn" in warnings[0], exporter.stderr_text()


def test_no_label_flags_no_warning(kubelet, dcgm, run_exporter):
    exporter = run_exporter(["--kubernetes.api", "off", "--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    assert LABELS_IGNORED not in exporter.stderr_text()


def test_help_states_the_node_name_default():
    text = " ".join(run(["--help"]).stdout.split())  # argparse wraps to the terminal's width
    entry = text[text.rindex("--kubernetes.node-name NAME"):]  # its entry, after the usage line
    entry = entry[:entry.index(" --", 1)]
    assert "(default: env NODE_NAME" in entry and "else the host name)" in entry, entry
    assert "(default: none)" not in entry, entry


def test_demo_honours_refresh_interval_and_leaves_nvml_alone():
    demo = start_exporter(["demo", "--kubelet.refresh-interval", "10s"])
    try:
        # Refreshed every 2 s, the mapping would never be older than that.
        wait_until(lambda: float(gauge(requests.get(demo.url(), timeout=10).text,
                                       "pod_gpu_exporter_mapping_age_seconds")) >= 3.0, timeout_seconds=9)
        assert NVML_NOTE not in demo.stderr_text()  # the simulated node has no MIG-<uuid> device
    finally:
        assert demo.stop() == 0


def test_mapping_without_mig_uuids_leaves_nvml_alone(kubelet):
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", GPU)])
    result = run(["mapping", "--kubelet.socket", kubelet.socket_path])
    assert result.returncode == 0 and "trainer" in result.stdout
    assert NVML_NOTE not in result.stderr, result.stderr


def test_serving_a_node_without_mig_uuids_leaves_nvml_alone(kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", GPU)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    assert 'pod="trainer"' in requests.get(exporter.url(), timeout=10).text
    assert NVML_NOTE not in exporter.stderr_text()


def test_the_mapping_command_the_demo_prints_works():
    proc = subprocess.Popen(exporter_command() + ["demo", "--web.listen-address", "127.0.0.1:0"], cwd=str(REPO_ROOT),
                            env=exporter_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        command = wait_until(lambda: next((l.strip() for l in list(lines) if " mapping --kubelet.socket " in l), None))
        # The README tells a reader to paste the line after these words.
        before = lines[[l.strip() for l in lines].index(command) - 1]
        assert "as `mapping` prints it on a real node" in before, before
        result = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT),
                                env=exporter_env())
        assert result.returncode == 0, result.stderr
        assert "trainer-0" in result.stdout and "llm-server-b" in result.stdout, result.stdout
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
