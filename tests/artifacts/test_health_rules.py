"""prometheus/rules/pod-gpu-health.rules.yml and its promtool unit tests, checked by the real promtool."""

from __future__ import annotations

import shutil

import pytest
import yaml

from support.deploy_tools import PROMETHEUS_DIR
from support.promtool_tests import run_promtool

RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.yml"
RULES_TESTS = PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.test.yml"


def _alerts():
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule]


def test_health_rules_pass_promtool_check_and_their_unit_tests():
    check = run_promtool("check", "rules", str(RULES))
    assert check.returncode == 0 and f"SUCCESS: {len(_alerts())} rules found" in check.stdout, check.stdout + check.stderr
    result = run_promtool("test", "rules", str(RULES_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("expected, wrong, alert", [
    ("reason: lost", "reason: unhealthy", "GpuWorkloadOnUnhealthyGpu"),
    ("pod: intruder", "pod: someone-else", "GpuUsedWithoutAllocation"),
])
def test_the_unit_tests_fail_on_a_wrong_expectation(tmp_path, expected, wrong, alert):
    shutil.copy(RULES, tmp_path / RULES.name)
    text = RULES_TESTS.read_text()
    changed = text.replace(expected, wrong, 1)
    assert changed != text
    (tmp_path / RULES_TESTS.name).write_text(changed)
    result = run_promtool("test", "rules", str(tmp_path / RULES_TESTS.name))
    assert result.returncode != 0 and alert in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_silent_and_documented_with_severity_and_annotations():
    docs = (PROMETHEUS_DIR.parent / "docs" / "health.md").read_text()
    cases = [t for case in yaml.safe_load(RULES_TESTS.read_text())["tests"] for t in case.get("alert_rule_test", [])]
    for rule in _alerts():
        tested = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case.get("exp_alerts") for case in tested), f"{rule['alert']} never tested firing"
        assert any(not case.get("exp_alerts") for case in tested), f"{rule['alert']} never tested silent"
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        assert f"`{rule['alert']}`" in docs, f"docs/health.md says nothing of what to do on {rule['alert']}"
