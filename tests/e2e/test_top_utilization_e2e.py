"""`top`'s UTIL is the autoscaling rule's number: a real Prometheus scraping the demo with the shipped rules,
`top --prometheus` read between two readings of `namespace_pod:pod_gpu_utilization:ratio`; in process mode
(each pod's own share) and in device mode with --labels.mode join (whole GPUs only; shared ones have none)."""

from __future__ import annotations

import pytest

from support.autoscaling import DEMO_MODE_IDS, DEMO_MODES, RECORD, by_pod, demo_with_recorded_rule, query
from support.top_runs import top_json

# The demo's load moves by under 0.02 a second, and the rule is evaluated once a second: top's reading of
# the latest samples lies between the rule's values just before and just after it, give or take this.
SLACK = 0.03


@pytest.fixture(scope="module", params=DEMO_MODES, ids=DEMO_MODE_IDS)
def stack(request):
    with demo_with_recorded_rule(request.param, "pgx-top-util-") as prometheus:
        yield prometheus, not request.param


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
