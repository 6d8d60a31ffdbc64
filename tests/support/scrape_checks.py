"""Checks on what the real exporter serves: scraping it, splitting sample lines, parsing with real parsers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

L4 = "dcgm/l4-aws-gpu-operator-default-counters.prom"


L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


OWNER_LABELS = ("namespace", "pod", "container", "pod_uid", "pod_name", "pod_namespace", "container_name")


FAST_REFRESH = ["--kubelet.refresh-interval", "200ms"]


def scrape(exporter, path="/gpu/metrics", **kwargs) -> requests.Response:
    response = requests.get(exporter.url(path), timeout=10, **kwargs)
    response.raise_for_status()
    return response


def sample_lines(text: str):
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def split_sample(line: str):
    """(name, label text, rest) of a sample line, by position, independent of the exporter's code."""
    brace, close = line.index("{"), line.rindex("}")
    return line[:brace], line[brace + 1 : close], line[close + 1 :]


def without_owner_labels(label_text: str) -> str:
    pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', label_text)
    return ",".join(f'{n}="{v}"' for n, v in pairs if n not in OWNER_LABELS)


def gpu_uuids(body: bytes):
    return sorted(set(re.findall(rb'(?:UUID|uuid)="(GPU-[^"]+)"', body)))


def assert_parses(text: str):
    families = list(text_string_to_metric_families(text))
    assert families, "prometheus_client parsed nothing"
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (apt-get install prometheus)")
        return
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    # 0 = clean, 3 = lint findings only (dcgm names always lint); 1 = a parse error.
    assert result.returncode in (0, 3), result.stderr.decode() + result.stdout.decode()

