"""A real Prometheus scraping the real exporter in process mode, with the shipped rules: the dashboard's
process-mode panels and the recording rules answer, and a GPU's energy is never counted twice."""

from __future__ import annotations

import json
import re
import threading

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import DASHBOARD, RULES, require_executable
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS, PrometheusServer
from support.shared_node import L4, MIB, shares_served
from support.waiting import wait_until

PROCESS_MODE_SERIES = re.compile(r"pod_gpu_(container_(energy|idle)|unattributed|unallocated)_")


def test_dashboard_panels_and_rules_of_process_mode_answer_from_real_scrapes(gpu_node, tmp_path):
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/run does)")
    for pod in ("busy", "parked"):
        gpu_node.add_pod(pod)
    gpu_node.kubelet.set_devices([AllocatedDevice("ml", pod, "main", "nvidia.com/gpu", f"{L4}::{replica}")
                                  for replica, pod in enumerate(("busy", "parked"))])
    gpu_node.add_pod("stray")  # holds no GPU, but runs on this one
    gpu_node.nvml.gpu(0, L4).energy(L4, 10**9).process(L4, 10, 300 * MIB).sample(L4, 10, 50)
    gpu_node.nvml.process(L4, 20, 200 * MIB).write()
    gpu_node.run_in(10, "busy")
    gpu_node.run_in(20, "stray")
    exporter = gpu_node.start()
    shares_served(exporter, count=2)
    stop = threading.Event()

    def burn():  # the board draws 360 W: its energy counter moves 360 J a second
        energy = 10**9
        while not stop.wait(0.25):
            energy += 90_000
            gpu_node.nvml.energy(L4, energy).write()

    burner = threading.Thread(target=burn, daemon=True)
    burner.start()
    prometheus = PrometheusServer(binary, tmp_path, {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                            "static_configs": [{"targets": [exporter.address]}]}]})
    try:
        panels = [p for p in json.loads(DASHBOARD.read_text())["panels"]
                  if any(PROCESS_MODE_SERIES.search(t["expr"]) for t in p.get("targets", []))]
        assert len(panels) >= 3
        for panel in panels:
            for target in panel["targets"]:
                promql = target["expr"].replace("$cluster", ".*").replace("$vendor", ".*").replace("$namespace", "ml").replace("$pod", "busy|parked")
                assert wait_until(lambda query=promql: prometheus.query(query), DEADLINE_SECONDS, POLL_SECONDS,
                                  panel["title"])
        # Shared or not, the holders' energy adds up to the board's at most (the burner may lag on a
        # loaded machine), never to once per holder (720 W here).
        watts = wait_until(lambda: prometheus.query(
            'sum(rate(pod_gpu_container_energy_joules_total[5s])) + sum(rate(pod_gpu_unattributed_energy_joules_total[5s]))'),
            DEADLINE_SECONDS, POLL_SECONDS, "energy rate")
        assert 0 < float(watts[0]["value"][1]) < 470, watts
        memory = wait_until(lambda: prometheus.query("node:pod_gpu_unattributed_memory_used_bytes:sum"),
                            DEADLINE_SECONDS, POLL_SECONDS, "memory")
        assert float(memory[0]["value"][1]) == 200 * MIB  # the stray pod's process
    finally:
        stop.set()
        burner.join(timeout=5)
        prometheus.stop()
