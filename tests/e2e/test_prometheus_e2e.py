"""End to end: a real Prometheus scrapes the real exporter (fake kubelet + HTTP dcgm upstream) with the project's rules."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import DASHBOARD, SHIPPED_RULE_FILES
from support.fixtures import fixture_bytes
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS, get_json
from support.rules_stack import scrape_stack
from support.waiting import wait_until

PROCESS_MODE_SERIES = re.compile(r"pod_gpu_(container_(energy|idle)|unattributed|unallocated)_")
# Health panels read series that need pod status or DRA slices from the Kubernetes API, or NVML's events:
# this stack has neither.
HEALTH_SERIES = re.compile(r"pod_gpu_(device_(health_status|taint|lost)|container_xid_errors)")
# The Queues row reads pod-gpu-queue.rules.yml's series, which need --labels.extra queue and Kueue's
# own metrics: promtool tests them (tests/artifacts/test_queue_rules.py).
QUEUE_SERIES = re.compile(r"\b(cluster_queue|namespace_local_queue):")
NAMESPACE, POD, CONTAINER = "ml-team", "trainer-0", "cuda"
GPU_UTIL = "87"  # the L4 scrape reads 0; a distinctive value proves which sample came through
L4_POWER_WATTS = 16.365  # DCGM_FI_DEV_POWER_USAGE in the L4 scrape, unchanged


def _upstream_body() -> bytes:
    body, count = re.subn(rb"^(DCGM_FI_DEV_GPU_UTIL\{[^}]*\}) 0$", rb"\1 " + GPU_UTIL.encode(),
                          fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom"), flags=re.MULTILINE)
    assert count == 1
    return body


@pytest.fixture(scope="module")
def stack():
    body = _upstream_body()
    uuid = re.search(rb'UUID="(GPU-[^"]+)"', body).group(1).decode()
    devices = [AllocatedDevice(NAMESPACE, POD, CONTAINER, "nvidia.com/gpu", uuid)]
    # Every shipped rule file, as the ConfigMap loads them: the dashboard reads records of several.
    with scrape_stack(devices, body, "pgx-prom-", rule_files=tuple(SHIPPED_RULE_FILES.values())) as stack:
        yield stack.prometheus, uuid


def test_query_by_pod_returns_the_upstream_value(stack):
    prometheus, uuid = stack
    (series,) = wait_until(lambda: prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{pod="{POD}"}}'), DEADLINE_SECONDS, POLL_SECONDS, "GPU_UTIL by pod")
    assert series["value"][1] == GPU_UTIL
    labels = series["metric"]
    assert (labels["namespace"], labels["container"], labels["UUID"]) == (NAMESPACE, CONTAINER, uuid)


@pytest.mark.parametrize("promql, expected", [
    (f'namespace_pod:DCGM_FI_DEV_GPU_UTIL:avg{{namespace="{NAMESPACE}",pod="{POD}"}}', float(GPU_UTIL)),
    (f'namespace_pod:DCGM_FI_DEV_POWER_USAGE:sum{{namespace="{NAMESPACE}",pod="{POD}"}}', L4_POWER_WATTS),
    (f'namespace:DCGM_FI_DEV_POWER_USAGE:sum{{namespace="{NAMESPACE}"}}', L4_POWER_WATTS),
    (f'namespace:pod_gpu_allocation_info:count{{namespace="{NAMESPACE}"}}', 1.0),
    # Device mode, one whole GPU: its utilisation as a fraction.
    (f'namespace_pod:pod_gpu_utilization:ratio{{namespace="{NAMESPACE}",pod="{POD}"}}', float(GPU_UTIL) / 100),
])
def test_recording_rules_evaluate_on_real_scrapes(stack, promql, expected):
    prometheus, _ = stack
    (series,) = wait_until(lambda: prometheus.query(promql), DEADLINE_SECONDS, POLL_SECONDS, promql)
    assert float(series["value"][1]) == pytest.approx(expected)


def test_every_rule_evaluates_without_error(stack):
    prometheus, _ = stack

    def evaluated_rules():
        groups = get_json(prometheus.url + "/api/v1/rules")["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        done = rules and all(r["health"] != "unknown" for r in rules)
        return rules if done else None

    rules = wait_until(evaluated_rules, DEADLINE_SECONDS, POLL_SECONDS, "every rule evaluated once")
    shipped = [r for path in SHIPPED_RULE_FILES.values() for g in yaml.safe_load(path.read_text())["groups"]
               for r in g["rules"]]
    assert len(rules) == len(shipped)
    assert [(r["name"], r.get("lastError", "")) for r in rules if r["health"] != "ok"] == []


def test_dashboard_queries_return_data_for_the_pod(stack):
    prometheus, _ = stack
    dashboard = json.loads(DASHBOARD.read_text())
    # Process-mode panels read series a device-mode exporter does not serve: they are run against a
    # process-mode exporter in test_process_shares_prometheus_e2e.py.
    targets = [t for p in dashboard["panels"] for t in p.get("targets", [])
               if not any(skipped.search(t["expr"]) for skipped in (PROCESS_MODE_SERIES, HEALTH_SERIES, QUEUE_SERIES))]
    assert targets
    for target in targets:
        promql = target["expr"].replace("$cluster", ".*").replace("$vendor", ".*").replace("$namespace", NAMESPACE).replace("$pod", POD)
        assert wait_until(lambda query=promql: prometheus.query(query), DEADLINE_SECONDS, POLL_SECONDS, promql)
