"""prometheus/demo/prometheus.yml, the demo's Prometheus: valid from the checkout with every shipped rule file (its
rule_files are relative to its own folder), the demo's scrape job as shipped with `node: demo-node`, and the
command that runs it is the one README.md gives and the demo prints. (Run for real in
tests/e2e/test_demo_prometheus_e2e.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from exporter.demo.explain import DEBIAN_FLAGS, DEMO_TARGET, PROMETHEUS_COMMAND, explain
from support.deploy_tools import CONFIGMAP, REPO_ROOT, SHIPPED_RULE_FILES, require_executable
from support.demo_prometheus import DEMO_CONFIG
from support.promtool_tests import INSTALL_PROMTOOL


def test_it_is_valid_from_the_checkout_with_every_rule_file():
    promtool = require_executable("promtool", INSTALL_PROMTOOL)
    # As the README runs Prometheus: from the checkout, the path relative to it.
    result = subprocess.run([promtool, "check", "config", str(DEMO_CONFIG.relative_to(REPO_ROOT))], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(SHIPPED_RULE_FILES)} rule files found" in result.stdout
    checked = [Path(name).name for name in re.findall(r"(?m)^Checking (\S+\.rules\.yml)$", result.stdout)]
    assert sorted(checked) == sorted(SHIPPED_RULE_FILES)


def test_it_scrapes_the_demo_as_the_shipped_job_does_with_a_node():
    (job,) = yaml.safe_load(DEMO_CONFIG.read_text())["scrape_configs"]
    shipped = yaml.safe_load(yaml.safe_load(CONFIGMAP.read_text())["data"]["prometheus.yml"])["scrape_configs"][0]
    assert {key: job[key] for key in ("job_name", "honor_labels")} == {key: shipped[key] for key in ("job_name", "honor_labels")}
    assert job["metrics_path"] == "/gpu/metrics"
    assert job["static_configs"] == [{"targets": [DEMO_TARGET], "labels": {"node": "demo-node"}}]


def test_the_readme_gives_the_command_and_the_demo_prints_it(capsys):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert PROMETHEUS_COMMAND == f"prometheus --config.file={DEMO_CONFIG.relative_to(REPO_ROOT)}"
    assert f"\n{PROMETHEUS_COMMAND}\n" in readme
    assert f"`{DEBIAN_FLAGS}`" in " ".join(readme.split())  # where a packaged service holds 9090 and its data
    explain(f"http://{DEMO_TARGET}/gpu/metrics", "/tmp/kubelet.sock", "", "mapping",
            top=".venv/bin/pod-gpu-metrics-exporter")
    printed = capsys.readouterr().out
    assert f"\n  {PROMETHEUS_COMMAND}\n" in printed and "change its target" not in printed
    assert DEBIAN_FLAGS in printed
    explain("http://127.0.0.1:9500/gpu/metrics", "/tmp/kubelet.sock", "", "mapping",
            top=".venv/bin/pod-gpu-metrics-exporter")
    assert f"change its target {DEMO_TARGET} to 127.0.0.1:9500" in capsys.readouterr().out
