"""`top` run as users run it (a child process), and the demo's own series to check its table against."""

from __future__ import annotations

import json
import subprocess
from typing import Dict, List, Optional, Sequence

import requests

from support.demo_process import samples, start_demo
from support.exporter_process import REPO_ROOT, ExporterProcess, exporter_command, exporter_env
from support.fake_kube_api import make_pod, write_kubeconfig
from support.fake_pod_proxy import PodProxyApi
from support.waiting import wait_until

EXPORTER_NAMESPACE = "gpu-monitoring"
EXPORTER_LABELS = {"app.kubernetes.io/name": "pod-gpu-metrics-exporter"}


def run_top(args: Sequence[str], env: Optional[dict] = None, timeout: float = 60.0,
            command: Optional[List[str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run((command or exporter_command() + ["top"]) + list(args), cwd=str(REPO_ROOT),
                          env=exporter_env(env), capture_output=True, text=True, timeout=timeout)


def top_json(args: Sequence[str], **kwargs) -> dict:
    run = run_top(list(args) + ["-o", "json"], **kwargs)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def rows_by_pod(document: dict) -> Dict[str, dict]:
    return {row["pod"]: row for row in document["rows"]}


def served(url: str) -> Dict[tuple, float]:
    """The demo's own series now: (name, labels) → value."""
    return samples(requests.get(url, timeout=10).text)


def own_sum(series: Dict[tuple, float], family: str, pod: str) -> float:
    return sum(value for (name, labels), value in series.items() if name == family and f'pod="{pod}"' in labels)


def add_exporter_pod(api: PodProxyApi, name: str, node: str, address: Optional[str] = None,
                     phase: str = "Running") -> None:
    """An exporter pod on `node`, its port 9400 dialled at `address` (None: nothing listens there)."""
    api.put("v1", "pods", make_pod(EXPORTER_NAMESPACE, name, node, labels=EXPORTER_LABELS, phase=phase))
    if address:
        api.expose(EXPORTER_NAMESPACE, name, "9400", address)


def kubeconfig_for(api: PodProxyApi, folder) -> str:
    return write_kubeconfig(str(folder / "kubeconfig"), api.url)


def start_demo_with_energy() -> ExporterProcess:
    """The demo, once its energy counters have started: they start with its first per-process refresh, and
    a window `top` reads before then has no rate."""
    exporter = start_demo()
    wait_until(lambda: own_sum(served(exporter.url()), "pod_gpu_container_energy_joules_total", "trainer-0"),
               20, 0.2, "the demo's energy counters")
    return exporter


def start_demo_keeping_its_text(*args: str):
    """`demo ARGS` as a user starts it, with what it prints (stdout) kept: (ExporterProcess, its lines so far)."""
    import subprocess as sp
    import threading

    from support.demo_process import console_script
    from support.exporter_process import STARTED, ExporterProcess

    proc = sp.Popen([console_script(), "demo", *args, "--web.listen-address", "127.0.0.1:0"], cwd=str(REPO_ROOT),
                    env=exporter_env(), stdout=sp.PIPE, stderr=sp.PIPE, text=True)
    lines: List[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    demo = ExporterProcess(proc)
    STARTED.append(demo)
    demo.wait_listening(20.0)
    return demo, lines


def within_readings(value: float, readings: Sequence[float], slack: float) -> bool:
    """Whether `value` lies between the lowest and highest of `readings` (the demo's own, read before and
    after), give or take `slack`: its values move, and `top` read them somewhere in between."""
    return min(readings) - slack <= value <= max(readings) + slack
