"""A real Prometheus scraping the real exporter over a fake kubelet and a simulated dcgm-exporter, evaluating
the shipped rules (or none): for end-to-end tests of what the rules and dashboards compute and of what it ingests."""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Sequence

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import RULES, require_executable
from support.exporter_process import ExporterProcess, start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.prometheus_server import PrometheusServer


@dataclass(frozen=True)
class ScrapeStack:
    prometheus: PrometheusServer
    dcgm: FakeDcgmExporter  # a test may change its body while Prometheus scrapes
    exporter: ExporterProcess  # what Prometheus scrapes, which a test may read directly too


@contextmanager
def scrape_stack(devices: List[AllocatedDevice], body: bytes, prefix: str,
                 rule_files: Sequence[Path] = (RULES,)) -> Iterator[ScrapeStack]:
    """Prometheus scraping the exporter every second (honor_labels, as shipped) and evaluating `rule_files`."""
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: unix socket paths are limited
    kubelet = FakeKubelet(str(folder / "kubelet.sock"))
    kubelet.set_devices(devices)
    dcgm = FakeDcgmExporter(body)
    started = []
    try:
        for part in (kubelet, dcgm):
            part.start()
            started.append(part)
        exporter = start_exporter(["--kubelet.socket", str(folder / "kubelet.sock"), "--dcgm.url", dcgm.url,
                                   "--kubelet.refresh-interval", "1s"])
        started.append(exporter)
        prometheus = PrometheusServer(binary, folder, {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                                "static_configs": [{"targets": [urllib.parse.urlsplit(exporter.url()).netloc]}]}],
        })
        started.append(prometheus)
        yield ScrapeStack(prometheus, dcgm, exporter)
    finally:
        for part in reversed(started):
            part.stop()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def rules_stack(devices: List[AllocatedDevice], body: bytes, prefix: str) -> Iterator[PrometheusServer]:
    """The Prometheus of a scrape_stack evaluating the shipped RULES."""
    with scrape_stack(devices, body, prefix) as stack:
        yield stack.prometheus
