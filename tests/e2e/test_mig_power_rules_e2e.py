"""End to end: a real Prometheus runs the shipped rules on the real exporter serving a real A800 MIG scrape, where
dcgm-exporter repeats the board's power on every MIG instance; the power rules count that GPU once per pod and
namespace, memory per instance."""

from __future__ import annotations

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.fixtures import fixture_bytes
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS
from support.rules_stack import rules_stack
from support.waiting import wait_until

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
    with rules_stack(DEVICES, fixture_bytes(SCRAPE), "pgx-mig-") as prometheus:
        yield prometheus


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
        wait_until(settled, DEADLINE_SECONDS, POLL_SECONDS, promql)
    except AssertionError:
        pass
    assert [float(series["value"][1]) for series in last] == [pytest.approx(expected)], promql
