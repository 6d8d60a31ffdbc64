"""prometheus/rules/pod-gpu-queue.rules.yml, checked and unit-tested by the real promtool."""

from __future__ import annotations

import shutil

import yaml

from support.deploy_tools import PROMETHEUS_DIR
from support.promtool_tests import run_promtool

QUEUE_RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-queue.rules.yml"
QUEUE_RULES_TESTS = PROMETHEUS_DIR / "rules" / "pod-gpu-queue.rules.test.yml"


def test_queue_rules_pass_promtool_check():
    result = run_promtool("check", "rules", str(QUEUE_RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_queue_rule_unit_tests_pass_and_cover_every_rule_in_both_modes():
    result = run_promtool("test", "rules", str(QUEUE_RULES_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    recorded = {rule["record"] for group in yaml.safe_load(QUEUE_RULES.read_text())["groups"] for rule in group["rules"]}
    tests = yaml.safe_load(QUEUE_RULES_TESTS.read_text())["tests"]
    assert len(tests) == 2  # samples mode and join mode
    for test in tests:
        assert {case["expr"] for case in test["promql_expr_test"]} == recorded


def test_queue_rule_unit_tests_fail_on_a_wrong_expectation(tmp_path):
    shutil.copy(QUEUE_RULES, tmp_path / QUEUE_RULES.name)
    text = QUEUE_RULES_TESTS.read_text()
    ratio = """nominal_quota_ratio{cluster_queue="cq-research",vendor="nvidia"}'\n            value: 0.25"""
    changed = text.replace(ratio, ratio.replace("0.25", "0.3"), 1)
    assert changed != text
    (tmp_path / QUEUE_RULES_TESTS.name).write_text(changed)
    result = run_promtool("test", "rules", str(tmp_path / QUEUE_RULES_TESTS.name))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "nominal_quota_ratio" in output, output
