"""End to end: a real Prometheus runs the shipped rules on the real exporter serving a real A800 MIG scrape, where
dcgm-exporter repeats the board's power on every MIG instance; the power rules count that GPU once per pod and
namespace, memory per instance."""

from __future__ import annotations

import shutil
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from exporter.demo.fake_dcgm import FakeDcgmExporter
from exporter.demo.fake_kubelet import FakeKubelet
from exporter.sources.kubelet import AllocatedDevice
from support.deploy_tools import RULES, require_executable
from support.exporter_process import start_exporter
from support.fixtures import fixture_bytes
from support.prometheus_server import PrometheusServer, eventually

# GPU 0 of the scrape is in MIG mode with instances 3, 5 and 6; its DCGM_FI_DEV_POWER_USAGE reads
# 78.174 on instances 3 and 5 and 78.446 on instance 6 (the board's, sampled at slightly different
# moments), 10 MiB framebuffer used on each instance.
SCRAPE = "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom"
UUID = "GPU-1f027ee8-6e1e-2b8c-0108-3d370e5f0418"
NAMESPACE = "ml"
DEVICES = [  # ml/a holds two instances of the GPU, ml/b the third
    AllocatedDevice(NAMESPACE, "a", "main", "nvidia.com/mig-2g.20gb", f"MIG-{UUID}/3/0"),
    AllocatedDevice(NAMESPACE, "a", "main", "nvidia.com/mig-2g.20gb", f"MIG-{UUID}/5/0"),
    AllocatedDevice(NAMESPACE, "b", "main", "nvidia.com/mig-2g.20gb", f"MIG-{UUID}/6/0"),
]


@pytest.fixture(scope="module")
def stack():
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix="pgx-mig-", dir="/tmp"))  # short: unix socket paths are limited
    kubelet = FakeKubelet(str(folder / "kubelet.sock"))
    kubelet.set_devices(DEVICES)
    dcgm = FakeDcgmExporter(fixture_bytes(SCRAPE))
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


@pytest.mark.parametrize("promql, expected", [
    # The board's power once (not 156.348 for two instances, nor 234.794 for three).
    (f'namespace_pod:DCGM_FI_DEV_POWER_USAGE:sum{{namespace="{NAMESPACE}",pod="a"}}', 78.174),
    (f'namespace_pod:DCGM_FI_DEV_POWER_USAGE:sum{{namespace="{NAMESPACE}",pod="b"}}', 78.446),
    (f'namespace:DCGM_FI_DEV_POWER_USAGE:sum{{namespace="{NAMESPACE}"}}', 78.446),
    # Memory is each instance's own: it adds up.
    (f'namespace_pod:DCGM_FI_DEV_FB_USED:sum{{namespace="{NAMESPACE}",pod="a"}}', 20.0),
    (f'namespace:DCGM_FI_DEV_FB_USED:sum{{namespace="{NAMESPACE}"}}', 30.0),
])
def test_mig_board_power_counts_once_per_gpu(stack, promql, expected):
    # Poll until the value is right (an evaluation before the exporter's first attributed scrape
    # may lack a pod), then assert on the last answer so that a wrong value is shown.
    last = []

    def settled():
        last[:] = stack.query(promql)
        return len(last) == 1 and float(last[0]["value"][1]) == pytest.approx(expected)

    try:
        eventually(settled, promql)
    except AssertionError:
        pass
    assert [float(series["value"][1]) for series in last] == [pytest.approx(expected)], promql
