"""dcgm-exporter wrote `Hostname` up to mid 4.x and `hostname` since: attribution must not care which."""

from __future__ import annotations

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.fake_dcgm import FakeDcgmExporter
from support.fixtures import fixture_bytes
from support.scrape_checks import L4_UUID

OWNER = ',namespace="ml",pod="trainer-0",container="cuda"}'


@pytest.mark.parametrize("spelling", ["Hostname", "hostname"])
def test_either_spelling_is_attributed_and_passed_through(spelling, kubelet, run_exporter):
    body = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom").replace(b'Hostname="', f'{spelling}="'.encode())
    assert f'{spelling}="i-030791dc5a37cd257"'.encode() in body
    dcgm = FakeDcgmExporter(body)
    dcgm.start()
    try:
        kubelet.set_devices([AllocatedDevice("ml", "trainer-0", "cuda", "nvidia.com/gpu", L4_UUID)])
        exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
        served = requests.get(exporter.url(), timeout=10).text.splitlines()
    finally:
        dcgm.stop()
    upstream = [line for line in body.decode().splitlines() if line.startswith("DCGM_")]
    # Every sample comes back byte for byte, the label spelled as dcgm-exporter spelled it,
    # with the owner appended.
    expected = [line.replace("} ", OWNER + " ", 1) for line in upstream]
    assert [line for line in served if line.startswith("DCGM_")] == expected
    assert f'{spelling}="i-030791dc5a37cd257"' in expected[0]
