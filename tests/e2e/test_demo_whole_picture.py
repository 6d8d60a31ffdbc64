"""`pod-gpu-metrics-exporter demo`, run as the README runs it, serves every family of the catalogue, each on
its endpoint (/gpu/metrics or /metrics), but those NOT_DEMONSTRABLE says it cannot, and its counters move."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List

import requests

from exporter.vendors.nvidia.demo.nvml import LOST_AFTER_SECONDS
from exporter.vendors.nvidia.demo.workload import gpu_uuid
from exporter.collectors.catalogue import CATALOGUE
from exporter.exposition.families import SELF, TELEMETRY
from exporter.vendors.amd.families import AMD_NODE
from support.demo_process import samples, start_demo
from support.exporter_process import start_exporter
from support.waiting import wait_until

# The catalogue's families the demo does not serve, each with why: the one place for them. Every other
# family of the catalogue, the exporter's own on /metrics too, is served with at least one sample.
NOT_DEMONSTRABLE: Dict[str, str] = {}
# What the demo's simulated faults log at warn, the only such lines it may log: its XIDs, and GPU 3
# falling off the bus (the event wait that fails, then the GPU named lost).
SIMULATED_FAULTS = ('msg="XID event"', "reason=gpu_lost", 'msg="NVML reports a GPU lost')
# Counters that grow on the simulated node between two scrapes a few seconds apart (an XID comes
# 8 s after start, then every 12 s), and gauges whose processes' use moves.
MOVING = (
    "pod_gpu_container_energy_joules_total", "pod_gpu_container_idle_seconds_total",
    "pod_gpu_unattributed_energy_joules_total", "pod_gpu_device_xid_errors_total",
    "pod_gpu_container_xid_errors_total", "pod_gpu_container_memory_used_bytes",
    "pod_gpu_container_sm_utilization_ratio",
)


def _totals(text: str) -> dict:
    """family → sum of its samples' values in one scrape."""
    totals: dict = {}
    for (name, _labels), value in samples(text).items():
        totals[name] = totals.get(name, 0.0) + value
    return totals


def _missing(scrape) -> List[str]:
    """The catalogue's families without a sample on their endpoint, less those NOT_DEMONSTRABLE; and those
    it names that are served after all, so that the list never outlives its reason."""
    served = {endpoint: {name for name, _ in samples(scrape(endpoint))} for endpoint in (TELEMETRY, SELF)}
    # The demo's node is NVIDIA's: AMD nodes' own families are not its to serve.
    missing = [f"{family.endpoint} {family.name}" for family in CATALOGUE
               if family.name not in served[family.endpoint] and family.name not in NOT_DEMONSTRABLE
               and AMD_NODE not in family.modes]
    return missing + [f"{family.endpoint} {family.name} (served, yet NOT_DEMONSTRABLE)" for family in CATALOGUE
                      if family.name in NOT_DEMONSTRABLE and family.name in served[family.endpoint]]


def test_not_demonstrable_names_families_of_the_catalogue():
    assert set(NOT_DEMONSTRABLE) <= {family.name for family in CATALOGUE}


def test_the_demo_serves_every_family_and_its_counters_move():
    demo = start_demo()
    try:
        def scrape(path: str = TELEMETRY) -> str:
            return requests.get(demo.url(path), timeout=10).text

        # The shares come with the first NVML refresh after the API's first pod list.
        first = wait_until(lambda: (lambda text: text if "pod_gpu_container_energy_joules_total{" in text else "")(scrape()),
                           timeout_seconds=30, describe="the first per-process shares")
        # A newcomer's first run logs nothing that looks like a problem, but the faults it simulates.
        assert not [line for line in demo.stderr_text().splitlines()
                    if ("level=warn" in line or "level=error" in line)
                    and not any(fault in line for fault in SIMULATED_FAULTS)]
        # The last family comes once GPU 3 is lost, and its event registration is retried, after a second.
        missing = _last_answer(lambda: _missing(scrape), timeout_seconds=LOST_AFTER_SECONDS + 15)
        assert not missing, f"families the demo does not serve: {missing}"
        before = _totals(first)
        unmoved = _last_answer(lambda: [name for name in MOVING if _totals(scrape()).get(name) == before.get(name)],
                               timeout_seconds=40)
        assert not unmoved, f"served, but did not move in 40 s: {unmoved}"
    finally:
        assert demo.stop() == 0
    # The job-mapping folder it wrote for --hpc.job-mapping-dir goes when it stops.
    folder = re.search(r'msg="HPC job mapping on: .*? directory=(\S+)', demo.stderr_text())
    assert folder and not Path(folder.group(1)).exists()


def _last_answer(problems, timeout_seconds: float) -> list:
    """Polls `problems()` until it is empty or time runs out; its last answer."""
    last: list = []

    def solved() -> bool:
        last[:] = problems()
        return not last

    try:
        wait_until(solved, timeout_seconds=timeout_seconds, interval=0.5)
    except AssertionError:
        pass
    return last


def test_without_simulated_nvml_the_demo_serves_device_level_samples_only():
    demo = start_exporter(["demo", "--demo.nvml", "off"])
    try:
        text = wait_until(lambda: (lambda t: t if 'pod="trainer-0"' in t else "")(requests.get(demo.url(), timeout=10).text))
        names = {name for name, _ in samples(text)}
        assert "pod_gpu_allocation_info" in names and "pod_gpu_exporter_nvml_up" not in names
        assert not [name for name in names if name.startswith(("pod_gpu_container_energy", "pod_gpu_unattributed_"))]
    finally:
        assert demo.stop() == 0


# What each holder is allocated, with its queue: trainer-0 is queued through Kueue, llm-server-a through
# the KAI Scheduler label on its Deployment, llm-server-b in no queue. GPU 3, published by the DRA driver and held by nobody, changes none of it.
ALLOCATED = {
    '{namespace="ml-team",pod="trainer-0",container="pytorch",cluster_queue="cq-research",local_queue="team-ml"}': 2.0,
    '{namespace="inference",pod="llm-server-a",container="vllm",cluster_queue="inference",local_queue=""}': 0.5,
    '{namespace="inference",pod="llm-server-b",container="vllm",cluster_queue="",local_queue=""}': 0.25,
}
DRA_TAINT = f'{{UUID="{gpu_uuid(3)}",gpu="3",key="gpu.nvidia.com/unmonitored",value="",effect="None"}}'


def test_the_demo_queues_trainer_0_and_llm_server_a_and_serves_its_dra_gpus_taint():
    demo = start_demo()
    try:
        def served():
            found = samples(requests.get(demo.url(), timeout=10).text)
            allocated = {labels: value for (name, labels), value in found.items()
                         if name == "pod_gpu_container_allocated_gpus"}
            taints = {labels for name, labels in found if name == "pod_gpu_device_taint"}
            return found if allocated == ALLOCATED and taints == {DRA_TAINT} else None

        found = wait_until(served, timeout_seconds=30, describe="trainer-0's and llm-server-a's queues and GPU 3's DRA taint")
        held = {labels for name, labels in found if name == "pod_gpu_allocation_info"}
        assert len(held) == 5 and not [labels for labels in held if 'gpu="3"' in labels]
    finally:
        assert demo.stop() == 0
