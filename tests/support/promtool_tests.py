"""promtool rule tests on what the real exporter served: its samples as input series of one target, and promtool's run."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import List

from support.deploy_tools import require_executable
from support.scrape_checks import sample_lines, split_sample

# The target the input series come from, as the shipped scrape config labels it.
TARGET_LABELS = ('instance="node-a:9400"', 'job="pod-gpu-metrics"')


def input_series(text: str, minutes: int, counters_grow: bool = False) -> List[dict]:
    """The served samples as promtool input series of one target, each holding its value for `minutes` more
    minutes; with `counters_grow`, a counter instead starts at 0 and grows by its value every minute."""
    counters = set(re.findall(r"(?m)^# TYPE (\S+) counter$", text)) if counters_grow else set()
    series = []
    for line in sample_lines(text):
        if "{" in line:
            name, labels, rest = split_sample(line)
        else:
            (name, rest), labels = line.split(" ", 1), ""
        value = rest.split()[0]
        labels = ",".join(filter(None, (labels, *TARGET_LABELS)))
        values = f"0+{value}x{minutes}" if name in counters else f"{value}x{minutes}"
        series.append({"series": f"{name}{{{labels}}}", "values": values})
    return series


INSTALL_PROMTOOL = "apt-get install -y prometheus (.ci/system-packages.sh does)"


def run_promtool(*args: str, promtool: str = "") -> subprocess.CompletedProcess:
    """`promtool <args>` (the one on PATH, or the binary `promtool` names), its output captured."""
    binary = promtool or require_executable("promtool", INSTALL_PROMTOOL)
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def run_rule_test(test: dict, path: Path) -> subprocess.CompletedProcess:
    """Writes the rule test `test` to `path` and runs `promtool test rules` on it."""
    path.write_text(json.dumps(test, indent=1))  # JSON is YAML
    return run_promtool("test", "rules", str(path))
