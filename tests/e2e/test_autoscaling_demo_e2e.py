"""Autoscaling tried on the demo as docs/autoscaling.md tells: `demo --labels.extra workload` behind the Prometheus
of prometheus/demo/prometheus.yml. The KEDA query the page sends (keda-scaledobject.yaml's, with the demo's
Deployment in it) answers exactly one element, and the ranges the page states for the demo's pods hold over ten
evaluations of the rules and are the demo's own: what its load curves give over a whole cycle."""

from __future__ import annotations

import math
import re

import pytest

from exporter.vendors.nvidia.demo.workload import SIMULATED_PROCESSES, gpu_load
from support.autoscaling import (RECORD, by_pod, documented_demo_keda_query, documented_demo_ranges, keda_trigger,
                                 query)
from support.demo_prometheus import demo_behind_prometheus
from support.prometheus_server import DEADLINE_SECONDS
from support.waiting import wait_until

EVALUATIONS = 10
NEIGHBOUR = 'namespace_pod:DCGM_FI_DEV_GPU_UTIL:avg{pod="llm-server-b"}'
# The GPUs each pod is allocated on the demo (pod_gpu_container_allocated_gpus, checked served by
# tests/e2e/test_demo_whole_picture.py): the rule divides the pod's own SM time by them.
ALLOCATED = {"trainer-0": 2.0, "llm-server-a": 0.5}
# The demo's load curves repeat every 2π·20 s (exporter/vendors/nvidia/demo/workload.py's gpu_load).
CYCLE_SECONDS = 2 * math.pi * 20
# A range states the demo's to two decimals: it holds the curve's, and is no more than this wider at either end.
STATED_TO = 0.01


@pytest.fixture(scope="module")
def prometheus():
    with demo_behind_prometheus("--labels.extra", "workload") as stack:
        wait_until(lambda: len(query(stack.prometheus, f"count_over_time({RECORD}[1m]) >= {EVALUATIONS}")) == 3 and
                   query(stack.prometheus, f"count_over_time({NEIGHBOUR}[1m]) >= {EVALUATIONS}"),
                   2 * DEADLINE_SECONDS, 0.5, f"{EVALUATIONS} evaluations of the rules for each demo pod")
        yield stack.prometheus


def _one_line(promql: str) -> str:
    """`promql` written on one line: single spaces, none just inside parentheses."""
    return re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", " ".join(promql.split())))


def test_the_keda_query_the_page_sends_to_the_demo_answers_one_element(prometheus):
    promql = documented_demo_keda_query()
    # keda-scaledobject.yaml's query, with the demo's Deployment for the example's: the two cannot drift apart.
    shipped = keda_trigger()["metadata"]["query"].replace('workload="llm-server"', 'workload="llm-server-a"')
    assert _one_line(promql) == _one_line(shipped)
    result = query(prometheus, promql)
    assert len(result) == 1 and result[0]["metric"] == {}, result
    at = float(result[0]["value"][0])
    assert float(result[0]["value"][1]) == by_pod(query(prometheus, f'{RECORD}{{pod="llm-server-a"}}', at))["llm-server-a"]


def _evaluations(prometheus, selector: str) -> dict:
    """pod → every value the rule recorded for it over the last minute."""
    return {series["metric"]["pod"]: [float(value) for _, value in series["values"]]
            for series in query(prometheus, f"{selector}[1m]")}


def test_the_stated_ranges_hold_over_ten_evaluations(prometheus):
    stated = documented_demo_ranges()
    recorded = _evaluations(prometheus, RECORD)
    assert set(recorded) == {"trainer-0", "llm-server-a", "llm-server-b"}
    for pod, (low, high) in stated.items():
        values = recorded[pod] if pod != "neighbour" else _evaluations(prometheus, NEIGHBOUR)["llm-server-b"]
        assert len(values) >= EVALUATIONS
        assert [value for value in values if not low - 1e-3 <= value <= high + 1e-3] == [], (pod, stated[pod], values)
    assert set(recorded["llm-server-b"]) == {0.0}


def _own_share(pod: str, elapsed: float) -> float:
    """The rule's number for `pod` at `elapsed`: its processes' SM percent as the demo's NVML reports it (whole
    percent of its GPU's load), over the GPUs it holds."""
    percent = sum(round(100 * gpu_load(p.gpu, elapsed) * p.sm_part) for p in SIMULATED_PROCESSES
                  if p.pod and p.pod[1] == pod)
    return percent / 100 / ALLOCATED[pod]


def test_the_stated_ranges_are_the_demos_over_a_whole_cycle():
    moments = [CYCLE_SECONDS * step / 20000 for step in range(20000)]
    curves = {pod: [_own_share(pod, t) for t in moments] for pod in ALLOCATED}
    curves["neighbour"] = [round(100 * gpu_load(2, t)) for t in moments]  # GPU 2's DCGM_FI_DEV_GPU_UTIL
    for pod, (low, high) in documented_demo_ranges().items():
        lowest, highest = min(curves[pod]), max(curves[pod])
        assert low <= lowest + 1e-9 and highest <= high + 1e-9, (pod, (low, high), (lowest, highest))
        assert lowest - low < STATED_TO and high - highest < STATED_TO, (pod, (low, high), (lowest, highest))
