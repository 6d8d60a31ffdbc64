"""The autoscaling number on a real Prometheus scraping the demo with the shipped rules: asked as
prometheus-adapter asks it for a pods request (prometheus-adapter-values.yaml's rule, expanded as the adapter
expands it), each demo pod reads its own SM share over its GPUs, compared with the demo's own series at the
same moment; in device mode (and join mode) a pod on a shared GPU reads nothing rather than its neighbour's work."""

from __future__ import annotations

import re

import pytest

from support.autoscaling import (DEMO_MODE_IDS, DEMO_MODES, RECORD, adapter_rule, by_pod, demo_with_recorded_rule,
                                 documented_demo_ranges, expand_pods_query, keda_pod_name_query, query, series_names)
from support.prometheus_server import DEADLINE_SECONDS
from support.waiting import wait_until

DEMO_PODS = {"ml-team": ["trainer-0"], "inference": ["llm-server-a", "llm-server-b"]}
# Two readings of one moment may straddle one scrape; the demo's load moves by under 0.02 a second.
SLACK = 0.02


@pytest.fixture(scope="module", params=DEMO_MODES, ids=DEMO_MODE_IDS)
def demo(request):
    """(Prometheus scraping the demo, whether the demo serves per-process shares)."""
    with demo_with_recorded_rule(request.param, "pgx-autoscale-") as prometheus:
        yield prometheus, not request.param


def _adapter_reading(prometheus, namespace: str, at: float) -> dict:
    """pod → value, as prometheus-adapter answers GET .../namespaces/<namespace>/pods/*/gpu_utilization at `at`:
    the series its seriesQuery finds, renamed by name.matches/as, read by the expanded metricsQuery."""
    rule = adapter_rule()
    (series,) = [name for name in series_names(prometheus, rule["seriesQuery"])
                 if re.fullmatch(rule["name"]["matches"], name)]
    assert re.sub(rule["name"]["matches"], rule["name"]["as"], series) == "gpu_utilization"
    return by_pod(query(prometheus, expand_pods_query(rule["metricsQuery"], series, namespace, DEMO_PODS[namespace]), at))


def _own_share(prometheus, at: float) -> dict:
    """pod → its own SM over its GPUs, worked out here from the demo's raw series at `at`."""
    used = by_pod(query(prometheus, "sum by (pod) (pod_gpu_container_sm_utilization_ratio)", at))
    held = by_pod(query(prometheus, "sum by (pod) (pod_gpu_container_allocated_gpus)", at))
    return {pod: used[pod] / held[pod] for pod in used}


def _whole_gpus_busy(prometheus, at: float) -> float:
    """trainer-0's two whole GPUs' mean DCGM_FI_DEV_GPU_UTIL, as a fraction, from the raw series at `at`."""
    (sample,) = query(prometheus, 'avg(max by (UUID) (DCGM_FI_DEV_GPU_UTIL{gpu=~"0|1"})) / 100', at)
    return float(sample["value"][1])


def _rule_time(prometheus) -> float:
    return max(float(s["value"][1]) for s in query(prometheus, f"timestamp({RECORD})"))


def test_the_adapter_reads_each_demo_pod_its_own_share_of_its_gpus(demo):
    prometheus, process_mode = demo
    at = _rule_time(prometheus)
    readings = {**_adapter_reading(prometheus, "ml-team", at), **_adapter_reading(prometheus, "inference", at)}
    if process_mode:
        expected = _own_share(prometheus, at)
        assert set(readings) == set(expected) == {"trainer-0", "llm-server-a", "llm-server-b"}
        for pod, value in readings.items():
            assert value == pytest.approx(expected[pod], abs=SLACK), (pod, readings, expected)
        stated = documented_demo_ranges()  # what docs/autoscaling.md says (tests/e2e/test_autoscaling_demo_e2e.py)
        for pod in ("trainer-0", "llm-server-a"):
            assert stated[pod][0] - SLACK <= readings[pod] <= stated[pod][1] + SLACK, (pod, readings, stated)
        # Present, and 0: it holds a replica of GPU 2 and runs nothing there, however busy llm-server-a keeps it.
        assert readings["llm-server-b"] == 0
        # What the whole-GPU recipe would have scaled it on (that rule's group may not have run yet).
        (old,) = wait_until(lambda: query(prometheus, 'namespace_pod:DCGM_FI_DEV_GPU_UTIL:avg{pod="llm-server-b"}'),
                            DEADLINE_SECONDS, 0.5, "the whole-GPU rule")
        assert float(old["value"][1]) > 20
    else:
        # Device mode: trainer-0 holds GPUs 0 and 1 whole; GPU 2 is time-sliced, so its holders have no value.
        assert set(readings) == {"trainer-0"}, readings
        assert readings["trainer-0"] == pytest.approx(_whole_gpus_busy(prometheus, at), abs=SLACK)


def test_the_keda_pod_name_query_answers_one_element(demo):
    prometheus, process_mode = demo
    promql = keda_pod_name_query().replace("llm-server-[a-z0-9]+-[a-z0-9]+", "llm-server-[a-z]")
    at = _rule_time(prometheus)
    result = query(prometheus, promql, at)
    if not process_mode:
        assert result == []  # an error for KEDA with ignoreNullValues "false", never a 0 that scales down
        return
    assert len(result) == 1 and result[0]["metric"] == {}
    pods = by_pod(query(prometheus, f'{RECORD}{{namespace="inference"}}', at))
    assert float(result[0]["value"][1]) == pytest.approx(sum(pods.values()) / 2)
