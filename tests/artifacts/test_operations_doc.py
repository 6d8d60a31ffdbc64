"""The operations docs stay true: docs/operations.md's alert rules load in promtool, its log fields name
every `dependency` the code can log, and the reference (docs/metrics.md) documents every family the
running exporter serves."""

from __future__ import annotations

import ast
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


def logged_dependencies() -> dict:
    """Every `dependency` value the exporter can log → where: the name of each DependencyReporter and
    each `dependency=` given to a log call. A name not written as a string (a variable) is a fault: it
    could log a value no test sees."""
    found, unreadable = {}, []
    for path in sorted((REPO_ROOT / "exporter").rglob("*.py")):
        where = str(path.relative_to(REPO_ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            # A vendor names its upstream exporter once, in UpstreamWords; the scraper logs it by that name.
            values = [node.args[0]] if called in ("DependencyReporter", "UpstreamWords") and node.args else []
            values += [keyword.value for keyword in node.keywords if keyword.arg == "dependency"]
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    found.setdefault(value.value, where)
                elif not ((where == "exporter/base/logs.py" and ast.unparse(value) == "self.name")
                          or (where == "exporter/web/scrape.py" and ast.unparse(value) == "upstream_words.name")):
                    unreadable.append(f"{where}:{node.lineno}: {ast.unparse(value)}")
    assert not unreadable, f"dependency names not written as strings: {unreadable}"
    return found


def test_every_dependency_the_exporter_can_log_is_named_in_the_log_fields():
    text = OPERATIONS.read_text()
    fields = text[text.index("Fields: `ts`"):]
    fields = fields[:fields.index("\n\n")]
    found = logged_dependencies()
    assert {"kubelet", "dcgm-exporter", "kubernetes-api", "nvml-events"} <= set(found), found  # the finder finds
    missing = {name: where for name, where in found.items() if f"`{name}`" not in fields}
    assert not missing, f"log `dependency` values not listed in docs/operations.md's Fields: {missing}"
