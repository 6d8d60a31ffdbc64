"""The installed console script, and the demo the README starts with it: `pod-gpu-metrics-exporter demo`."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

from support.exporter_process import ExporterProcess, start_exporter

# name{labels} value, for the lines of one scrape that are samples.
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def console_script() -> str:
    """The console script installed beside the interpreter running the tests (a venv's bin/), else on PATH."""
    beside = Path(sys.executable).parent / "pod-gpu-metrics-exporter"
    path = str(beside) if beside.exists() else shutil.which("pod-gpu-metrics-exporter")
    if path is None and os.environ.get("CI"):
        pytest.fail("console script pod-gpu-metrics-exporter not installed (pip install -e .)")
    if path is None:
        pytest.skip("console script not installed (pip install -e .)")
    return path


def start_demo() -> ExporterProcess:
    """`pod-gpu-metrics-exporter demo` as the README runs it; only its address is a free port, not 9400,
    so that tests running side by side (and a demo a developer left running) do not collide."""
    return start_exporter(["demo"], command=[console_script()])


def samples(text: str) -> Dict[Tuple[str, str], float]:
    """(name, labels) → value of every sample in one scrape."""
    found = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            found[(match.group(1), match.group(2) or "")] = float(match.group(3))
    return found


def node_page_told(html: str) -> bool:
    """Whether the demo's node page tells its story: GPU 3 lost, notebook-7's use seen, and the XID event
    thread registered again after the loss (which fails its wait once, its row down for a moment)."""
    return "Lost GPUs" in html and "notebook-7" in html and 'xid_events</th><td class="up">' in html
