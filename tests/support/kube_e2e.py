"""The real exporter with the Kubernetes API on: starting it against the scenario node, reading its answer."""

from __future__ import annotations

import re

import requests

from support.fake_kube_api import make_pod
from support.kube_scenario import NODE

FAST = ["--kubelet.refresh-interval", "200ms"]


def start(run_exporter, node, *args, env=None):
    kubelet, dcgm, kubeconfig = node
    return run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                         "--kubernetes.kubeconfig", kubeconfig, "--kubernetes.node-name", NODE, *FAST, *args], env=env)


def scrape(exporter) -> str:
    response = requests.get(exporter.url(), timeout=10)
    response.raise_for_status()
    return response.text


def lines_of(text: str, pod: str):
    return [line for line in text.splitlines() if f'pod="{pod}"' in line]


def gauge(text: str, name: str):
    match = re.search(rf"(?m)^{name} (\S+)$", text)
    return match.group(1) if match else None


def add_pod(api, namespace, name, node=NODE, **fields):
    return api.put("v1", "pods", make_pod(namespace, name, node, **fields))

