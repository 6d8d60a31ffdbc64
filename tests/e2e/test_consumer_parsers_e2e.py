"""A real Prometheus keeps scraping the exporter, target up and every valid series there, while upstream sends lines its parser refuses."""

from __future__ import annotations

import re
import time

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.fixtures import fixture_bytes
from support.prometheus_server import DEADLINE_SECONDS, POLL_SECONDS
from support.rules_stack import scrape_stack
from support.waiting import wait_until

L4 = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom")
UUID = re.search(rb'UUID="(GPU-[^"]+)"', L4).group(1).decode()
GPU_UTIL = "87"  # the L4 scrape reads 0: this value proves that the body with the bad lines came through
# Each of these made a real Prometheus 2.42 mark the target down (the whole scrape lost) or
# client_golang's parser refuse the text, when the exporter passed it through.
BAD_LINES = (
    "# TYPE DCGM_FI_Y gauge ",
    "# TYPE DCGM_FI_Z  gauge",
    'DCGM_FI_Y{gpu="0"} 0 -1.1',
    'DCGM_FI_Y{gpu="1"} 0 -2',
    'DCGM_FI_Y{gpu="2"} 0 +2',
    'DCGM_FI_Y{gpu="3"} 0 99999999999999999999',
    'DCGM_FI_Y{gpu="4"} +NaN',
    'DCGM_FI_Y{gpu="5"} 1e400',
    'DCGM_FI_Y{gpu="6"} 0x1p3',
    'DCGM_FI_Y{gpu="7",__name__="DCGM_FI_W"} 1',
    'DCGM_FI_Y{gpu="8"} 1 ',
    "# TYPE DCGM_FI_S summary",
    'DCGM_FI_S{quantile="median"} 1',
)


def sample_count(body: bytes) -> int:
    return sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))


@pytest.fixture(scope="module")
def stack():
    devices = [AllocatedDevice("ml-team", "trainer-0", "cuda", "nvidia.com/gpu", UUID)]
    with scrape_stack(devices, L4, "pgx-parse-", rule_files=()) as running:  # no rules: the scrape is the concern
        yield running.prometheus, running.dcgm


def value_of(prometheus, promql: str):
    result = prometheus.query(promql)
    return result[0]["value"][1] if result else None


def test_bad_upstream_lines_leave_the_target_up_and_every_valid_series_arriving(stack):
    prometheus, dcgm = stack
    expected = sample_count(L4)
    wait_until(lambda: value_of(prometheus, 'count({__name__=~"DCGM_.+",pod="trainer-0"})') == str(expected),
               DEADLINE_SECONDS, POLL_SECONDS, "every L4 series, by pod")
    body, count = re.subn(rb"^(DCGM_FI_DEV_GPU_UTIL\{[^}]*\}) 0$", rb"\1 " + GPU_UTIL.encode(), L4, flags=re.MULTILINE)
    assert count == 1
    dcgm.body = body + "".join(line + "\n" for line in BAD_LINES).encode()
    switched = time.time()
    # Scrapes of the bad body for a few seconds: each one must have succeeded.
    wait_until(lambda: float(value_of(prometheus, "timestamp(up)") or 0) > switched + 5,
               DEADLINE_SECONDS, POLL_SECONDS, "Prometheus to scrape for 5 s after the switch")
    assert value_of(prometheus, 'DCGM_FI_DEV_GPU_UTIL{pod="trainer-0"}') == GPU_UTIL
    assert value_of(prometheus, "min_over_time(up[4s])") == "1"
    assert value_of(prometheus, 'count({__name__=~"DCGM_.+",pod="trainer-0"})') == str(expected)
    assert value_of(prometheus, "pod_gpu_exporter_malformed_lines") == str(len(BAD_LINES) - 1)  # the summary's TYPE is fine
