"""The operations docs stay true: docs/operations.md's alert rules load in promtool, and the reference
(docs/metrics.md) documents every family the running exporter serves."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from exporter.sources.kubelet import AllocatedDevice
from support.scrape_checks import L4_UUID

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = REPO_ROOT / "docs" / "metrics.md"
OPERATIONS = REPO_ROOT / "docs" / "operations.md"


def rule_blocks() -> list:
    return [block for block in re.findall(r"```yaml\n(.*?)```", OPERATIONS.read_text(), re.DOTALL) if "groups:" in block]


def test_alert_rules_pass_promtool(tmp_path):
    blocks = rule_blocks()
    assert blocks, "docs/operations.md has no rule group"
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (apt-get install prometheus)")
        pytest.skip("promtool not installed")
    for number, block in enumerate(blocks):
        assert yaml.safe_load(block)["groups"]
        path = tmp_path / f"rules-{number}.yml"
        path.write_text(block)
        result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_self_metric_is_documented(kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    served = set()
    for path in ("/gpu/metrics", "/metrics"):
        text = requests.get(exporter.url(path), timeout=10).text
        served |= set(re.findall(r"^# TYPE (pod_gpu_\w+) ", text, re.MULTILINE))
    assert len(served) >= 12
    doc = DOC.read_text()
    missing = sorted(name for name in served if f"`{name}" not in doc)
    assert not missing, f"not documented in docs/metrics.md: {missing}"
