"""prometheus/rules/pod-gpu-autoscaling.rules.yml (namespace_pod:pod_gpu_utilization:ratio), checked and unit-tested
by the real promtool in every case the rule tells apart."""

from __future__ import annotations

import shutil

import yaml

from support.deploy_tools import PROMETHEUS_DIR
from support.promtool_tests import run_promtool

RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-autoscaling.rules.yml"
RULES_TESTS = PROMETHEUS_DIR / "rules" / "pod-gpu-autoscaling.rules.test.yml"
RECORD = "namespace_pod:pod_gpu_utilization:ratio"
# The cases the promtool tests must hold, by their names: each mode of sharing and of labels, MIG, many clusters.
CASES = {"process mode, samples mode", "process mode, join mode", "device mode, samples mode", "device mode, join mode",
         "MIG in process mode, samples mode", "MIG in process mode, join mode", "two clusters in one store"}


def _rule() -> dict:
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    (rule,) = group["rules"]
    return rule


def test_rule_passes_promtool_check_and_keeps_cluster_in_every_grouping():
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    rule = _rule()
    assert rule["record"] == RECORD
    expr = rule["expr"]
    groupings = expr.count(" by (") + expr.count(" on (")
    assert groupings >= 10 and groupings == expr.count(" by (cluster, ") + expr.count(" on (cluster, ")
    assert "without" not in expr and "ignoring" not in expr


def test_rule_unit_tests_pass_for_every_case():
    result = run_promtool("test", "rules", str(RULES_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    assert {test["name"] for test in tests} == CASES
    for test in tests:
        assert [case["expr"] for case in test["promql_expr_test"]] == [RECORD]


def _run_with_rule(tmp_path, old: str, new: str):
    text = RULES.read_text()
    assert old in text
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(RULES_TESTS, tmp_path / RULES_TESTS.name)
    return run_promtool("test", "rules", str(tmp_path / RULES_TESTS.name))


def test_unit_tests_fail_when_a_shared_gpu_counts_for_its_holders(tmp_path):
    # Proves the device-mode cases can fail: the rule with the replica forms no longer refused.
    result = _run_with_rule(tmp_path, 'pod_gpu_allocation_info{device_id=~"', 'pod_gpu_allocation_info{device_id!~"')
    output = result.stdout + result.stderr
    assert result.returncode != 0 and RECORD in output, output


def test_unit_tests_fail_when_clusters_merge(tmp_path):
    result = _run_with_rule(tmp_path, "sum by (cluster, namespace, pod) (pod_gpu_container_sm_utilization_ratio)",
                            "sum by (namespace, pod) (pod_gpu_container_sm_utilization_ratio)")
    assert result.returncode != 0, result.stdout + result.stderr
