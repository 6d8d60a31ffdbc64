"""The Prometheus rule file and scrape config, checked by the real promtool (bookworm's, and trixie's for kubernetes_sd)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from support.deploy_tools import (
    RULES,
    SHIPPED_RULE_FILES,
    RULES_TESTS,
    configmap_data,
    require_env_executable,
)
from support.promtool_tests import run_promtool

INSTALL_PROMTOOL_K8S = "set it with `export PROMTOOL_K8S=$(bash .ci/promtool-trixie.sh)` (.ci/run does)"


def _rules():
    return yaml.safe_load(RULES.read_text())["groups"]


def _unit_tests():
    """The cases of pod-gpu-metrics.rules.test.yml and of the mixed fleet's tests, which run these rules too."""
    mixed = RULES_TESTS.with_name("pod-gpu-mixed-fleet.rules.test.yml")
    return [case for path in (RULES_TESTS, mixed) for case in yaml.safe_load(path.read_text())["tests"]]


def test_rule_file_passes_promtool_check():
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    rule_count = sum(len(group["rules"]) for group in _rules())
    assert f"SUCCESS: {rule_count} rules found" in result.stdout


def test_rule_unit_tests_pass():
    result = run_promtool("test", "rules", str(RULES_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_fail_on_a_wrong_expectation(tmp_path):
    # Proves the unit tests can fail: same rules, one expected value changed.
    shutil.copy(RULES, tmp_path / RULES.name)
    text = RULES_TESTS.read_text()
    changed = text.replace("value: 4500", "value: 4501", 1)
    assert changed != text
    (tmp_path / RULES_TESTS.name).write_text(changed)
    result = run_promtool("test", "rules", str(tmp_path / RULES_TESTS.name))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and 'expr: "namespace:DCGM_FI_DEV_FB_USED:sum"' in output, output


def test_unit_tests_cover_every_rule_firing_and_not_firing():
    records = {r["record"] for g in _rules() for r in g["rules"] if "record" in r}
    alerts = {r["alert"] for g in _rules() for r in g["rules"] if "alert" in r}
    tested_exprs = {t["expr"].strip() for case in _unit_tests() for t in case.get("promql_expr_test", [])}
    assert records <= tested_exprs, f"recording rules without a promql_expr_test: {records - tested_exprs}"
    alert_cases = [t for case in _unit_tests() for t in case.get("alert_rule_test", [])]
    firing = {t["alertname"] for t in alert_cases if t.get("exp_alerts")}
    silent = {t["alertname"] for t in alert_cases if not t.get("exp_alerts")}
    assert alerts <= firing, f"alerts never tested firing: {alerts - firing}"
    assert alerts <= silent, f"alerts never tested not firing: {alerts - silent}"


def test_every_alert_has_severity_summary_and_description():
    for rule in (r for g in _rules() for r in g["rules"] if "alert" in r):
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def _write_config_from_configmap(folder: Path) -> Path:
    """prometheus.yml from the ConfigMap, its rule path pointed at the ConfigMap's rule copy in `folder`."""
    data = configmap_data()
    config = yaml.safe_load(data["prometheus.yml"])
    for key in SHIPPED_RULE_FILES:
        (folder / key).write_text(data[key])
    config["rule_files"] = [str(folder / Path(p).name) for p in config["rule_files"]]
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_configmap_config_passes_promtool_with_kubernetes_sd(tmp_path):
    # bookworm's promtool is built without Kubernetes discovery; trixie's has it.
    promtool = require_env_executable("PROMTOOL_K8S", INSTALL_PROMTOOL_K8S)
    original = tmp_path / "original.yml"
    original.write_text(configmap_data()["prometheus.yml"])
    result = run_promtool("check", "config", "--syntax-only", str(original), promtool=promtool)
    assert result.returncode == 0, result.stdout + result.stderr
    # The full check also loads the rule file the config names (here: the ConfigMap's copy).
    full = run_promtool("check", "config", str(_write_config_from_configmap(tmp_path)), promtool=promtool)
    assert full.returncode == 0, full.stdout + full.stderr
    assert "SUCCESS" in full.stdout and "rules found" in full.stdout


def test_kubernetes_sd_promtool_rejects_a_broken_scrape_config(tmp_path):
    # Proves the config check can fail: an unknown service discovery role.
    promtool = require_env_executable("PROMTOOL_K8S", INSTALL_PROMTOOL_K8S)
    broken = tmp_path / "broken.yml"
    broken.write_text(configmap_data()["prometheus.yml"].replace("role: pod", "role: pods"))
    result = run_promtool("check", "config", "--syntax-only", str(broken), promtool=promtool)
    assert result.returncode != 0
