"""`top`'s UTIL is the autoscaling rule's number: a real Prometheus scraping the demo with the shipped rules,
`top --prometheus` read between two readings of `namespace_pod:pod_gpu_utilization:ratio`; in process mode
(each pod's own share) and in device mode with --labels.mode join (whole GPUs only; shared ones have none)."""

from __future__ import annotations

import urllib.parse

import pytest

from support.autoscaling import RECORD, by_pod, prometheus_scraping, query
from support.demo_process import console_script
from support.exporter_process import start_exporter
from support.prometheus_server import DEADLINE_SECONDS
from support.top_runs import top_json
from support.waiting import wait_until

# The demo's load moves by under 0.02 a second, and the rule is evaluated once a second: top's reading of
# the latest samples lies between the rule's values just before and just after it, give or take this.
SLACK = 0.03


@pytest.fixture(scope="module", params=[[], ["--demo.nvml", "off", "--labels.mode", "join"]],
                ids=["process-samples", "device-join"])
def stack(request):
    exporter = start_exporter(["demo", *request.param], command=[console_script()])
    try:
        with prometheus_scraping(urllib.parse.urlsplit(exporter.url()).netloc, "pgx-top-util-") as prometheus:
            wait_until(lambda: len(query(prometheus, RECORD)) >= 1 and
                       len(query(prometheus, "pod_gpu_container_allocated_gpus")) == 3,
                       DEADLINE_SECONDS, 0.5, "the rule to record the demo's pods")
            yield prometheus, not request.param
    finally:
        exporter.stop()


def test_util_is_the_rules_value_and_absent_where_the_rule_has_none(stack):
    prometheus, process_mode = stack
    before = by_pod(query(prometheus, RECORD))
    document = top_json(["--prometheus", prometheus.url, "--window", "10s"])
    after = by_pod(query(prometheus, RECORD))
    util = {row["pod"]: row["utilization"] for row in document["rows"]}
    assert set(util) == {"trainer-0", "llm-server-a", "llm-server-b"}
    assert {pod for pod, value in util.items() if value is not None} == set(before) == set(after), (util, before)
    for pod in before:
        low, high = sorted((before[pod], after[pod]))
        assert low - SLACK <= util[pod] <= high + SLACK, (pod, util[pod], before[pod], after[pod])
    if process_mode:
        assert util["llm-server-b"] == 0  # holds a replica, runs nothing: 0, present
    else:
        assert set(before) == {"trainer-0"}  # GPU 2 is time-sliced: its holders have no number
    namespaces = top_json(["--prometheus", prometheus.url, "--window", "10s", "--by", "namespace"])["rows"]
    gpus = {row["pod"]: row["gpus"] for row in document["rows"]}
    for row in namespaces:  # weighed by GPUs held, never added up
        members = [pod for pod, value in util.items() if value is not None and
                   pod in {"ml-team": ["trainer-0"], "inference": ["llm-server-a", "llm-server-b"]}[row["namespace"]]]
        if members:
            assert 0 <= row["utilization"] <= 1
        else:
            assert row["utilization"] is None
    if process_mode:
        inference, = [row for row in namespaces if row["namespace"] == "inference"]
        weighted = (util["llm-server-a"] * gpus["llm-server-a"]) / (gpus["llm-server-a"] + gpus["llm-server-b"])
        assert inference["utilization"] == pytest.approx(weighted, abs=2 * SLACK)  # read by a second top, later
