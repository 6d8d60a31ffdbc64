"""prometheus/rules/pod-gpu-health.rules.yml, checked and unit-tested by the real promtool."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from support.deploy_tools import PROMETHEUS_DIR, require_executable

HEALTH_RULES = PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.yml"
HEALTH_TESTS = PROMETHEUS_DIR / "rules" / "pod-gpu-health.rules.test.yml"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    binary = require_executable("promtool", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def _alerts():
    return [rule for group in yaml.safe_load(HEALTH_RULES.read_text())["groups"] for rule in group["rules"]]


def test_health_rules_pass_promtool_check_and_their_unit_tests():
    check = _promtool("check", "rules", str(HEALTH_RULES))
    assert check.returncode == 0 and f"SUCCESS: {len(_alerts())} rules found" in check.stdout, check.stdout + check.stderr
    tests = _promtool("test", "rules", str(HEALTH_TESTS))
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_the_unit_tests_fail_on_a_wrong_expectation(tmp_path):
    shutil.copy(HEALTH_RULES, tmp_path / HEALTH_RULES.name)
    text = HEALTH_TESTS.read_text()
    changed = text.replace("pod: intruder", "pod: someone-else", 1)
    assert changed != text
    (tmp_path / HEALTH_TESTS.name).write_text(changed)
    result = _promtool("test", "rules", str(tmp_path / HEALTH_TESTS.name))
    assert result.returncode != 0 and "GpuUsedWithoutAllocation" in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_silent_and_documented():
    cases = [test for case in yaml.safe_load(HEALTH_TESTS.read_text())["tests"] for test in case["alert_rule_test"]]
    firing = {test["alertname"] for test in cases if test.get("exp_alerts")}
    silent = {test["alertname"] for test in cases if not test.get("exp_alerts")}
    docs = (PROMETHEUS_DIR.parent / "docs" / "health.md").read_text()
    for rule in _alerts():
        assert rule["alert"] in firing and rule["alert"] in silent, rule["alert"]
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        assert f"`{rule['alert']}`" in docs, f"docs/health.md says nothing of what to do on {rule['alert']}"
