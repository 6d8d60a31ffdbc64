"""A real Prometheus running the shipped rules on the real exporter, over a fake kubelet and a simulated
dcgm-exporter: for end-to-end tests of what the rules and dashboards compute."""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List

from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import RULES, require_executable
from support.exporter_process import start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.prometheus_server import PrometheusServer


@contextmanager
def rules_stack(devices: List[AllocatedDevice], body: bytes, prefix: str) -> Iterator[PrometheusServer]:
    """Prometheus scraping the exporter every second (honor_labels, as shipped) and evaluating RULES."""
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
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                                "static_configs": [{"targets": [urllib.parse.urlsplit(exporter.url()).netloc]}]}],
        })
        started.append(prometheus)
        yield prometheus
    finally:
        for part in reversed(started):
            part.stop()
        shutil.rmtree(folder, ignore_errors=True)
