"""`kubectl gpu top`: the installed console script `kubectl-gpu` is found and run by kubectl as a plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.fake_pod_proxy import PodProxyApi
from support.helm_tools import require_kubectl
from support.top_runs import EXPORTER_NAMESPACE, add_exporter_pod, kubeconfig_for

BODY = (b'pod_gpu_exporter_dcgm_up 1\n'
        b'pod_gpu_container_allocated_gpus{namespace="ml-team",pod="trainer-0",container="pytorch"} 2\n')


def _plugin() -> Path:
    script = Path(sys.executable).parent / "kubectl-gpu"
    if not script.exists():
        if os.environ.get("CI"):
            pytest.fail("console script kubectl-gpu not installed (pip install -e .)")
        pytest.skip("console script kubectl-gpu not installed (pip install -e .)")
    return script


def _env() -> dict:
    """PATH with the console scripts' folder first, as after `pip install` into an active venv."""
    return {**os.environ, "PATH": f"{_plugin().parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_the_console_script_is_the_kubectl_plugin_named_gpu():
    run = subprocess.run([str(_plugin()), "top", "--help"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and run.stdout.startswith("usage: kubectl gpu top"), run.stdout + run.stderr
    other = subprocess.run([str(_plugin()), "bottom"], capture_output=True, text=True, timeout=30)
    assert other.returncode == 2 and "the one command is `top`" in other.stderr


def test_kubectl_finds_and_runs_it(tmp_path):
    kubectl = require_kubectl()
    listed = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, timeout=30, env=_env())
    assert str(_plugin()) in listed.stdout, listed.stdout + listed.stderr
    api = PodProxyApi().start()
    try:
        add_exporter_pod(api, "pod-gpu-metrics-exporter-7xk2p", "gpu-node-1")
        api.serve_body(EXPORTER_NAMESPACE, "pod-gpu-metrics-exporter-7xk2p", "9400", BODY)
        run = subprocess.run([kubectl, "gpu", "top", "--kubeconfig", kubeconfig_for(api, tmp_path), "--window", "100ms",
                              "-o", "json"], capture_output=True, text=True, timeout=60, env=_env())
    finally:
        api.stop()
    assert run.returncode == 0, run.stderr
    row, = json.loads(run.stdout)["rows"]
    assert (row["pod"], row["node"], row["gpus"]) == ("trainer-0", "gpu-node-1", 2)
