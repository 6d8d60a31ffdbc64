"""A direct read of /gpu/metrics is the rule's number: for every pod, the real exporter's pod_gpu_utilization_ratio
equals namespace_pod:pod_gpu_utilization:ratio, which a real Prometheus records from the same exporter with every
shipped rule file, and is absent where the rule is: on the demo in process and device mode (its values move: within
one scrape's movement), and on a node whose pod has two containers holding one and two GPUs (a test-only kubelet,
dcgm-exporter and, in process mode, NVML), in device and process mode."""

from __future__ import annotations

import urllib.parse
from contextlib import contextmanager
from typing import Dict, Iterator, Tuple

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.autoscaling import DEMO_MODE_IDS, DEMO_MODES, RECORD, SHIPPED_RULES, prometheus_scraping, query
from support.demo_process import console_script
from support.exporter_process import start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.pod_numbers_node import A800_DEVICES, UUIDS, a800_body, container_memory, pod_utilization
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS
from support.rules_stack import scrape_stack
from support.scrape_checks import scrape
from support.shared_node import MIB
from support.waiting import wait_until

# The demo's load moves by under 0.02 a second; the rule is evaluated once a second over a scrape a second old.
SLACK = 0.03
Pods = Dict[Tuple[str, str], float]


def _rule(prometheus) -> Pods:
    return {(s["metric"]["namespace"], s["metric"]["pod"]): float(s["value"][1]) for s in query(prometheus, RECORD)}


@contextmanager
def _demo(args) -> Iterator[tuple]:
    exporter = start_exporter(["demo", *args], command=[console_script()])
    try:
        with prometheus_scraping(urllib.parse.urlsplit(exporter.url()).netloc, "pgx-pod-numbers-") as prometheus:
            wait_until(lambda: len(query(prometheus, "pod_gpu_container_allocated_gpus")) == 3 and _rule(prometheus),
                       DEADLINE_SECONDS, POLL_SECONDS, "the rule to record the demo's pods")
            yield exporter, prometheus
    finally:
        exporter.stop()


@pytest.fixture(scope="module", params=DEMO_MODES, ids=DEMO_MODE_IDS)
def demo(request):
    with _demo(request.param) as (exporter, prometheus):
        yield exporter, prometheus, not request.param


def test_on_the_demo_every_pods_direct_read_is_the_rules_value(demo):
    exporter, prometheus, process_mode = demo
    before = _rule(prometheus)
    direct = pod_utilization(scrape(exporter).text)
    after = _rule(prometheus)
    assert set(direct) == set(before) == set(after), (direct, before, after)
    for pod, value in direct.items():
        low, high = sorted((before[pod], after[pod]))
        assert low - SLACK <= value <= high + SLACK, (pod, value, before[pod], after[pod])
    if process_mode:
        # llm-server-b holds a replica of GPU 2 and runs nothing there: 0, present, whatever llm-server-a does.
        assert set(direct) == {("ml-team", "trainer-0"), ("inference", "llm-server-a"), ("inference", "llm-server-b")}
        assert direct[("inference", "llm-server-b")] == 0
    else:
        # Device mode: GPU 2 is time-sliced, so neither of its holders has a number, on the node as in the rule.
        assert set(direct) == {("ml-team", "trainer-0")}


def _agree(prometheus, read_directly, expected_pods) -> Pods:
    """Wait until the rule records exactly `expected_pods`, then the direct read equals it (the values do not move)."""
    wait_until(lambda: set(_rule(prometheus)) == expected_pods, DEADLINE_SECONDS, POLL_SECONDS,
               f"the rule to record {sorted(expected_pods)}")
    rule, direct = _rule(prometheus), pod_utilization(read_directly())
    assert set(direct) == set(rule) == expected_pods, (direct, rule)
    for pod, value in direct.items():
        assert value == pytest.approx(rule[pod], abs=1e-9), (pod, value, rule[pod])
    return direct


def test_device_mode_with_a_pod_whose_containers_hold_one_and_two_gpus():
    with scrape_stack(A800_DEVICES, a800_body(), "pgx-pod-numbers-", rule_files=SHIPPED_RULES) as stack:
        direct = _agree(stack.prometheus, lambda: scrape(stack.exporter).text,
                        {("ml", "mixed"), ("ml", "mig"), ("ml", "pair")})
        assert direct[("ml", "mixed")] == pytest.approx((0.3 + 0.6 + 0.9) / 3)  # GPUs 1 (a), 2 and 3 (b), each once


def test_process_mode_with_a_pod_whose_containers_hold_one_and_two_gpus_and_a_pod_running_nothing(gpu_node, tmp_path):
    gpu_node.add_pod("mixed", containers=("a", "b"))
    gpu_node.add_pod("idle")
    gpu_node.kubelet.set_devices([
        AllocatedDevice("ml", "mixed", "a", "nvidia.com/gpu", UUIDS[1]),
        AllocatedDevice("ml", "mixed", "b", "nvidia.com/gpu", UUIDS[2]),
        AllocatedDevice("ml", "mixed", "b", "nvidia.com/gpu", UUIDS[3]),
        AllocatedDevice("ml", "idle", "main", "nvidia.com/gpu", UUIDS[4])])
    for index in range(5):  # NVML lists GPUs from index 0; the A800's GPU 0 is held by nobody here
        gpu_node.nvml.gpu(index, UUIDS[index])
    gpu_node.nvml.process(UUIDS[1], 10, 300 * MIB).sample(UUIDS[1], 10, 40)
    gpu_node.nvml.process(UUIDS[2], 20, 100 * MIB).sample(UUIDS[2], 20, 10).write()
    gpu_node.run_in(10, "mixed", "a")
    gpu_node.run_in(20, "mixed", "b")
    # GPUs busy as a whole (GPU 4 at 20 %): only each pod's own share gives mixed 1/6 and idle 0.
    gpu_node.dcgm = FakeDcgmExporter(a800_body()).start()
    exporter = gpu_node.start()
    wait_until(lambda: len(container_memory(scrape(exporter).text)) == 3, DEADLINE_SECONDS, POLL_SECONDS,
               "each container's memory")
    with prometheus_scraping(exporter.address, "pgx-pod-numbers-") as prometheus:
        direct = _agree(prometheus, lambda: scrape(exporter).text, {("ml", "mixed"), ("ml", "idle")})
    assert direct == pytest.approx({("ml", "mixed"): (0.4 + 0.1) / 3, ("ml", "idle"): 0.0})
    assert container_memory(scrape(exporter).text) == {
        ("ml", "mixed", "a"): 300 * MIB, ("ml", "mixed", "b"): 100 * MIB, ("ml", "idle", "main"): 0}

