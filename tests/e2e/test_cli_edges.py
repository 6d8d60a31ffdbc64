"""The command line at its edges: settings a command cannot use, closed pipes, a busy port, the build info."""

from __future__ import annotations

import platform
import re
import socket
import subprocess

import pytest
import requests

from exporter import __version__
from exporter.config import parse_config
from exporter.sources.kubelet import AllocatedDevice
from support.exporter_process import REPO_ROOT, exporter_command, exporter_env


def run(args, env=None):
    return subprocess.run(exporter_command() + args, capture_output=True, text=True, timeout=60,
                          cwd=str(REPO_ROOT), env=exporter_env(env))


@pytest.mark.parametrize(
    "args, env, names",
    [
        (["demo", "--kubelet.socket", "/run/k.sock"], None, "--kubelet.socket"),
        (["demo", "--dcgm.url", "http://127.0.0.1:9401/metrics"], None, "--dcgm.url"),
        (["demo", "--dcgm.file", "/run/prometheus/dcgm.prom"], None, "--dcgm.file"),
        (["demo"], {"POD_GPU_EXPORTER_DCGM_URL": "http://127.0.0.1:9401/metrics"}, "POD_GPU_EXPORTER_DCGM_URL"),
        # The demo writes the job-mapping folder of its simulated Slurm job itself.
        (["demo", "--hpc.job-mapping-dir", "/var/run/dcgm-hpc-jobs"], None, "--hpc.job-mapping-dir"),
        (["demo"], {"POD_GPU_EXPORTER_HPC_JOB_MAPPING_DIR": "/var/run/dcgm-hpc-jobs"}, "POD_GPU_EXPORTER_HPC_JOB_MAPPING_DIR"),
        (["demo", "-o", "json"], None, "-o/--output"),
        (["-o", "json"], None, "-o/--output"),
        (["serve", "--output", "table"], None, "-o/--output"),
    ],
)
def test_a_setting_the_command_would_ignore_is_refused(args, env, names):
    result = run(args + ["--web.listen-address", "127.0.0.1:0"], env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{names} is not used by" in lines[0], result.stderr


def test_mapping_accepts_output_and_serve_accepts_the_sources():
    assert parse_config(["mapping", "-o", "json"], {}).output == "json"
    config = parse_config(["--kubelet.socket", "/k.sock", "--dcgm.url", "http://h:1/m"], {})
    assert (config.kubelet_socket, config.dcgm_url) == ("/k.sock", "http://h:1/m")


def test_demo_listens_on_loopback_unless_told_otherwise():
    assert parse_config(["demo"], {}).listen_address == "127.0.0.1:9400"
    assert parse_config(["demo", "--web.listen-address", ":9400"], {}).listen_address == ":9400"
    env = {"POD_GPU_EXPORTER_WEB_LISTEN_ADDRESS": "0.0.0.0:9500"}
    assert parse_config(["demo"], env).listen_address == "0.0.0.0:9500"
    # Serving a real node keeps the documented default: every interface.
    assert parse_config([], {}).listen_address == ":9400"


def test_demo_honours_an_explicit_refresh_interval():
    assert parse_config(["demo"], {}).kubelet_refresh_interval_seconds == 2.0
    assert parse_config(["demo", "--kubelet.refresh-interval", "10s"], {}).kubelet_refresh_interval_seconds == 10.0


def test_mapping_into_a_pipe_closed_early_has_no_traceback(kubelet):
    # More rows than a pipe buffer holds (64 KiB), so writing really hits the closed pipe.
    kubelet.set_devices([AllocatedDevice("ml", f"trainer-{n}", "pytorch", "nvidia.com/gpu",
                                         f"GPU-{n:08d}-7953-256e-8f33-1343419b1a1c") for n in range(1500)])
    command = " ".join(exporter_command() + ["mapping", "--kubelet.socket", kubelet.socket_path])
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -n 2"], capture_output=True,
                            text=True, timeout=60, cwd=str(REPO_ROOT), env=exporter_env())
    assert result.stdout.splitlines()[0].split()[0] == "NAMESPACE"
    assert len(result.stdout.splitlines()) == 2
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr


def test_address_in_use_names_the_flag_that_changes_it(kubelet):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        result = run(["--web.listen-address", address, "--kubelet.socket", kubelet.socket_path])
    assert result.returncode == 1
    error = [line for line in result.stderr.splitlines() if "level=error" in line]
    assert len(error) == 1 and "already in use" in error[0] and "--web.listen-address" in error[0], result.stderr


def test_build_info_on_metrics_and_version_in_the_start_up_log(kubelet, dcgm, run_exporter):
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    text = requests.get(exporter.url("/metrics"), timeout=10).text
    assert "# TYPE pod_gpu_exporter_build_info gauge" in text
    (line,) = [line for line in text.splitlines() if line.startswith("pod_gpu_exporter_build_info{")]
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    assert labels == {"version": __version__, "python_version": platform.python_version()}
    assert float(line.rsplit(" ", 1)[1]) == 1.0
    starting = [line for line in exporter.stderr_text().splitlines() if 'msg="starting' in line]
    assert len(starting) == 1 and f"version={__version__}" in starting[0]
    assert f"python={platform.python_version()}" in starting[0]
