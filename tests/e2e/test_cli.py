"""The command line as users run it: --help, bad flags, `mapping`, `demo`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.demo_process import console_script
from support.design_flags import DESIGN_FLAGS
from support.exporter_process import REPO_ROOT, exporter_env, start_exporter
from support.waiting import wait_until

GPU = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT), env=exporter_env(),
                          **kwargs)


@pytest.mark.parametrize("entry", ["module", "console-script"])
def test_help_lists_every_design_flag_with_its_env_var(entry):
    command = [sys.executable, "-m", "exporter"] if entry == "module" else [console_script()]
    result = run(command + ["--help"])
    assert result.returncode == 0
    for flag in DESIGN_FLAGS:
        assert flag in result.stdout
        assert "POD_GPU_EXPORTER_" + re.sub(r"[.-]", "_", flag[2:]).upper() in result.stdout
    for command_name in ("demo", "mapping"):
        assert command_name in result.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--dcgm.timeout", "soon"], "--dcgm.timeout: invalid duration"),
        (["--labels.style", "k8s"], "--labels.style"),
        (["--labels.mode", "joined"], "--labels.mode: invalid choice 'joined'"),
        (["--labels.limit", "8"], "--labels.limit: expected a whole number of labels, at least 12"),
        (["--web.config.file", "/nonexistent/web.yml"], "/nonexistent/web.yml"),
    ],
)
def test_bad_flags_exit_2_with_one_clear_line(args, says):
    result = run([sys.executable, "-m", "exporter"] + args + ["--web.listen-address", "127.0.0.1:0"])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


def test_mapping_prints_table_and_json(kubelet):
    kubelet.set_devices([
        AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", GPU),
        AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", "1"),
        AllocatedDevice("ml", "other", "x", "nvidia.com/mig-1g.10gb", "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"),
        AllocatedDevice("ml", "fpga", "x", "example.com/fpga", "f0"),
    ])
    table = run([sys.executable, "-m", "exporter", "mapping", "--kubelet.socket", kubelet.socket_path])
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "POD", "CONTAINER", "RESOURCE", "DEVICE_ID", "MATCHES"]
    assert any(GPU in line and f'UUID="{GPU}"' in line and "trainer" in line for line in lines)
    assert any('gpu="1"' in line for line in lines)
    assert any("(unresolved)" in line for line in lines) and "fpga" not in table.stdout
    result = run([sys.executable, "-m", "exporter", "mapping", "-o", "json", "--kubelet.socket", kubelet.socket_path])
    document = json.loads(result.stdout)
    assert document["api_version"] == "v1"
    assert {row["device_id"]: row["matches"] for row in document["allocations"]}["1"] == 'gpu="1"'


def test_mapping_without_kubelet_is_one_line_exit_1(socket_dir):
    result = run([sys.executable, "-m", "exporter", "mapping", "--kubelet.socket", str(socket_dir / "none.sock")])
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "not found" in result.stderr
    # A socket outside the kubelet's folder (a test's, the demo's under /tmp) is no host folder to mount.
    assert "is --kubelet.socket right, and its server running?" in result.stderr, result.stderr
    assert "-v /var/lib/kubelet" not in result.stderr


def test_mapping_of_the_kubelets_own_socket_path_says_to_mount_its_folder():
    from exporter.sources.kubelet import DEFAULT_SOCKET

    if Path(DEFAULT_SOCKET).exists():
        pytest.skip("this machine runs a kubelet")
    result = run([sys.executable, "-m", "exporter", "mapping", "--kubelet.socket", DEFAULT_SOCKET])
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "-v /var/lib/kubelet/pod-resources:/var/lib/kubelet/pod-resources:ro" in result.stderr, result.stderr


def test_an_unknown_command_names_every_command_top_included():
    result = run([sys.executable, "-m", "exporter", "frobnicate"])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "invalid choice: 'frobnicate' (choose from 'serve', 'demo', 'mapping', 'top')" in result.stderr
    late = run([sys.executable, "-m", "exporter", "--log.level", "debug", "top"])
    assert late.returncode == 2 and "`top` takes flags of its own and comes first" in late.stderr, late.stderr


@pytest.mark.parametrize("command", ["demo", "mapping"])
def test_a_commands_help_leaves_out_the_flags_it_refuses(command):
    from exporter.config import all_flags, refused_settings

    refused = refused_settings(command)
    assert refused  # each of them refuses some
    shown = run([sys.executable, "-m", "exporter", command, "--help"])
    everything = run([sys.executable, "-m", "exporter", "--help"])
    assert shown.returncode == 0 and everything.returncode == 0
    for flag in all_flags():
        listed = re.search(rf"^  {re.escape(flag.flag)}\b", shown.stdout, re.MULTILINE) is not None
        assert listed == (flag.field not in refused), (command, flag.flag)
        assert re.search(rf"^  {re.escape(flag.flag)}\b", everything.stdout, re.MULTILINE), flag.flag
    assert f"flags `{command}` does not use are left out" in shown.stdout
    if "output" in refused:
        assert "--output" not in shown.stdout


def test_demo_serves_attributed_samples_and_moves():
    demo = start_exporter(["demo"])
    try:
        first = requests.get(demo.url(), timeout=10).text
        assert 'pod="trainer-0"' in first and 'pod="llm-server-a"' in first and 'pod="llm-server-b"' in first
        idle = [l for l in first.splitlines() if l.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'gpu="3"' in l]
        assert len(idle) == 1 and "pod=" not in idle[0]
        shared = [l for l in first.splitlines() if l.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="2"' in l]
        assert len(shared) == 2  # two pods, one with two replicas: still exactly two series
        # GPU 2 is offered as 4 replicas: llm-server-a holds 2 of them, llm-server-b 1.
        allocated = {re.search(r'pod="([^"]+)"', l).group(1): float(l.rsplit(" ", 1)[1])
                     for l in first.splitlines() if l.startswith("pod_gpu_container_allocated_gpus{")}
        assert allocated == {"trainer-0": 2.0, "llm-server-a": 0.5, "llm-server-b": 0.25}

        def energy(text):
            return [l.rsplit(" ", 1)[1] for l in text.splitlines() if l.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{")]

        wait_until(lambda: energy(requests.get(demo.url(), timeout=10).text) != energy(first), timeout_seconds=20)
        assert "GetAllocatableResources" not in demo.stderr_text()  # the simulated kubelet answers it
    finally:
        assert demo.stop() == 0
