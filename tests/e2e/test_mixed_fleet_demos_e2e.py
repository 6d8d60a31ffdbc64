"""A mixed fleet on one machine: the NVIDIA demo and `demo --gpu.vendor amd` scraped together by one real Prometheus
with the shipped demo config's job (one target per demo, each its own `node`) and every rule file. The per-pod
utilisation rule is right for every pod of both that holds its devices alone or has its own share, each with its
vendor, as each demo's own /gpu/metrics gives it, and as each demo's own `pod_gpu_utilization_ratio` (the number a
controller reading the node directly keeps) says it; `top` shows the pods of both, each with its vendor."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import requests
import yaml

from exporter.vendors.amd.demo_node import HOLDERS, demo_gpus
from support.autoscaling import query
from support.demo_process import console_script, samples
from support.demo_prometheus import DEMO_CONFIG, loaded_rule_files
from support.deploy_tools import PROMETHEUS_DIR, SHIPPED_RULE_FILES, require_executable
from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer
from support.top_runs import run_top, start_demo_keeping_its_text, top_json
from support.waiting import wait_until

RECORD = "namespace_pod:pod_gpu_utilization:ratio"
NODES = {"nvidia": "nvidia-node", "amd": "amd-node"}
# NVIDIA's demo serves --sharing.mode process: each holder has its own share (llm-server-b's is 0, it runs nothing).
NVIDIA_PODS = {("ml-team", "trainer-0"), ("inference", "llm-server-a"), ("inference", "llm-server-b")}
# AMD's: the pods holding whole GPUs, each GPU held by one pod; the CPX partitions' activity is the whole GPU's.
def _whole_gpus_by_pod() -> Dict[Tuple[str, str], List[str]]:
    whole = {gpu.gpu_id for gpu in demo_gpus() if not gpu.partitioned}
    held: Dict[Tuple[str, str], List[str]] = defaultdict(list)
    for gpu_id, (namespace, pod, _container) in HOLDERS.items():
        if gpu_id in whole:
            held[(namespace, pod)].append(gpu_id)
    return dict(held)


AMD_GPUS = _whole_gpus_by_pod()
_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# Movement allowed between the scrape a rule evaluated and the direct reads around it: a second or two of the
# demos' curves, and AMD's whole percents.
SLACK = 0.03


@pytest.fixture(scope="module")
def fleet():
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix="pgx-mixed-fleet-", dir="/tmp"))
    demos, prometheus = {}, None
    try:
        demos["nvidia"], _ = start_demo_keeping_its_text()
        demos["amd"], _ = start_demo_keeping_its_text("--gpu.vendor", "amd")
        config = yaml.safe_load(DEMO_CONFIG.read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [demo.address], "labels": {"node": NODES[vendor]}}
                                 for vendor, demo in demos.items()]
        path = folder / "prometheus" / "demo" / DEMO_CONFIG.name
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump(config))
        (folder / "prometheus" / "rules").symlink_to(PROMETHEUS_DIR / "rules", target_is_directory=True)
        prometheus = PrometheusServer(binary, folder, path)
        wait_until(lambda: len(query(prometheus, f"count_over_time({RECORD}[1m]) >= 5")) == 7,
                   2 * DEADLINE_SECONDS, 0.5, "five evaluations of the rule for each pod of both demos")
        yield demos, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        for demo in demos.values():
            demo.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _sums(served: Dict[Tuple[str, str], float], name: str) -> Dict[Tuple[str, str], float]:
    totals: Dict[Tuple[str, str], float] = defaultdict(float)
    for (family, labels), value in served.items():
        if family == name:
            pairs = dict(_PAIR.findall(labels))
            totals[(pairs["namespace"], pairs["pod"])] += value
    return totals


def _nvidia_direct(demo) -> Dict[Tuple[str, str], float]:
    """Each NVIDIA holder's own SM share over its GPUs, as its demo serves them now."""
    served = samples(requests.get(demo.url(), timeout=10).text)
    sm, gpus = _sums(served, "pod_gpu_container_sm_utilization_ratio"), _sums(served, "pod_gpu_container_allocated_gpus")
    return {pod: min(sm.get(pod, 0.0) / gpus[pod], 1.0) for pod in NVIDIA_PODS}


def _amd_direct(demo) -> Dict[Tuple[str, str], float]:
    """Each AMD whole-GPU holder's mean gfx activity over its GPUs, as its demo serves them now."""
    served = samples(requests.get(demo.url(), timeout=10).text)
    activity = {dict(_PAIR.findall(labels))["gpu_id"]: value / 100
                for (name, labels), value in served.items() if name == "gpu_gfx_activity"}
    return {pod: sum(activity[gpu] for gpu in gpus) / len(gpus) for pod, gpus in AMD_GPUS.items()}


def _direct_readings(demos, seconds: float) -> Dict[Tuple[str, str, str], List[float]]:
    """(vendor, namespace, pod) → what each demo's own samples give, read every half second for `seconds`."""
    readings: Dict[Tuple[str, str, str], List[float]] = defaultdict(list)
    deadline = time.monotonic() + seconds
    while True:
        for vendor, reader in (("nvidia", _nvidia_direct), ("amd", _amd_direct)):
            for pod, value in reader(demos[vendor]).items():
                readings[(vendor, *pod)].append(value)
        if time.monotonic() > deadline:
            return readings
        time.sleep(0.5)


def test_the_rule_is_right_for_every_pod_of_both_vendors_each_with_its_vendor(fleet):
    demos, prometheus = fleet
    before = _direct_readings(demos, 4.0)
    recorded = {(s["metric"]["vendor"], s["metric"]["namespace"], s["metric"]["pod"]): float(s["value"][1])
                for s in query(prometheus, RECORD)}
    after = _direct_readings(demos, 1.0)
    assert set(recorded) == {("nvidia", *pod) for pod in NVIDIA_PODS} | {("amd", *pod) for pod in AMD_GPUS}, recorded
    for key, value in recorded.items():
        seen = before[key] + after[key]
        assert min(seen) - SLACK <= value <= max(seen) + SLACK, (key, value, min(seen), max(seen))
    assert recorded[("nvidia", "inference", "llm-server-b")] == 0.0  # holds its replica, runs nothing


def _own_numbers(demo) -> Dict[Tuple[str, str], float]:
    """(namespace, pod) → the demo's own pod_gpu_utilization_ratio, read as a controller reads the node."""
    served = samples(requests.get(demo.url(), timeout=10).text)
    numbers = {}
    for (name, labels), value in served.items():
        if name == "pod_gpu_utilization_ratio":
            pairs = dict(_PAIR.findall(labels))
            numbers[(pairs["namespace"], pairs["pod"])] = value
    return numbers


def test_a_direct_read_of_each_demo_gives_each_pod_the_rules_value(fleet):
    demos, prometheus = fleet
    before = {vendor: [_own_numbers(demo) for _ in range(4)] for vendor, demo in demos.items()}
    recorded = {(s["metric"]["vendor"], s["metric"]["namespace"], s["metric"]["pod"]): float(s["value"][1])
                for s in query(prometheus, RECORD)}
    after = {vendor: [_own_numbers(demo) for _ in range(2)] for vendor, demo in demos.items()}
    for vendor in demos:
        pods = {pod for reading in before[vendor] + after[vendor] for pod in reading}
        # The same pods: a number on the node exactly where the rule records one (absent where it is absent).
        assert pods == {(namespace, pod) for v, namespace, pod in recorded if v == vendor}, (vendor, pods)
        for pod in pods:
            seen = [reading[pod] for reading in before[vendor] + after[vendor] if pod in reading]
            value = recorded[(vendor, *pod)]
            assert min(seen) - SLACK <= value <= max(seen) + SLACK, (vendor, pod, value, seen)
    assert all(reading[("inference", "llm-server-b")] == 0.0 for reading in before["nvidia"] + after["nvidia"])


def test_top_shows_the_pods_of_both_each_with_its_vendor(fleet):
    _, prometheus = fleet
    document = top_json(["--prometheus", prometheus.url, "--window", "1m"], command=[console_script(), "top"])
    vendors = {(row["node"], row["namespace"], row["pod"]): row["vendor"] for row in document["rows"]}
    expected = {(NODES["nvidia"], *pod): "nvidia" for pod in NVIDIA_PODS}
    # Every AMD holder: of whole GPUs, and of CPX partitions (each counted as its share of the GPU).
    expected.update({(NODES["amd"], namespace, pod): "amd" for namespace, pod, _ in HOLDERS.values()})
    assert expected.items() <= vendors.items(), vendors
    assert {vendor for (node, *_), vendor in vendors.items() if node == NODES["amd"]} == {"amd"}
    table = run_top(["--prometheus", prometheus.url, "--window", "1m"], command=[console_script(), "top"])
    assert table.returncode == 0 and "VENDOR" in table.stdout.splitlines()[0], table.stdout + table.stderr


def test_every_rule_file_is_loaded(fleet):
    _, prometheus = fleet
    assert loaded_rule_files(prometheus) == sorted(SHIPPED_RULE_FILES)
