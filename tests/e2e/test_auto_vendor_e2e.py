"""--gpu.vendor auto against the real exporter process and a real gRPC kubelet on a unix socket: an AMD node (device
plugin, DRA only, or only its exporter's socket) is served as AMD, an NVIDIA one as NVIDIA, and a node that shows
nothing is served as NVIDIA until AMD's device plugin appears, then switched at a refresh, the choice logged once."""

from __future__ import annotations

import re

import pytest

from exporter.sources.kubelet import AllocatedDevice
from support.exporter_process import start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fixtures import fixture_bytes
from support.scrape_checks import scrape
from support.waiting import holds_throughout, wait_until

AMD_OFFERED = [("amd.com/spx_nps1", "0000:05:00.0"), ("amd.com/spx_nps1", "0000:27:00.0"),
               ("amd.com/nic", "0000:0c:00.0")]
L4 = "dcgm/l4-aws-gpu-operator-default-counters.prom"
L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
CHOSEN = "msg=\"GPU vendor chosen\""


def _vendor_served(exporter) -> str:
    match = re.search(r'(?m)^pod_gpu_exporter_vendor_info\{vendor="(\w+)"\} 1$', scrape(exporter).text)
    return match.group(1) if match else ""


def _serve(kubelet, *extra: str):
    return start_exporter(["--kubelet.socket", kubelet.socket_path, "--kubelet.refresh-interval", "200ms",
                           "--dcgm.url", "http://127.0.0.1:9/metrics", "--amd.metrics-url", "http://127.0.0.1:9/metrics",
                           "--amd.metrics-socket", "/nonexistent/amd.sock", *extra])


def test_a_node_offering_amd_gpus_is_served_as_amd(kubelet):
    kubelet.set_allocatable(AMD_OFFERED)
    exporter = _serve(kubelet)
    try:
        wait_until(lambda: _vendor_served(exporter) == "amd", 15, 0.1, "served as amd")
        (line,) = exporter.wait_for_lines(CHOSEN)
        assert "vendor=amd" in line and "amd.com/spx_nps1" in line
    finally:
        exporter.stop()


def test_a_dra_only_amd_node_is_served_as_amd(kubelet):
    # No device plugin at all: one GPU claimed through AMD's DRA driver.
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "gpu.amd.com", "gpu-8-136", dra=True,
                                         claim="ml/trainer-gpu", pool="node-1")])
    exporter = _serve(kubelet)
    try:
        wait_until(lambda: _vendor_served(exporter) == "amd", 15, 0.1, "served as amd")
        assert "gpu.amd.com" in exporter.wait_for_lines(CHOSEN)[0]
    finally:
        exporter.stop()


def test_the_amd_identity_socket_alone_names_amd_before_serving(kubelet, socket_dir):
    socket = socket_dir / "amd.sock"
    socket.write_text("")  # its presence is the sign; the identity collector's own reading is not this test's
    exporter = start_exporter(["--kubelet.socket", kubelet.socket_path, "--amd.metrics-socket", str(socket),
                               "--amd.metrics-url", "http://127.0.0.1:9/metrics"])
    try:
        assert _vendor_served(exporter) == "amd"
        assert str(socket) in exporter.wait_for_lines(CHOSEN)[0]
    finally:
        exporter.stop()


def test_an_nvidia_node_is_served_as_nvidia_and_attributed(kubelet):
    kubelet.set_allocatable([("nvidia.com/gpu", L4_UUID)])
    kubelet.set_devices([AllocatedDevice("ml", "trainer", "main", "nvidia.com/gpu", L4_UUID)])
    with FakeDcgmExporter(fixture_bytes(L4)) as dcgm:
        exporter = start_exporter(["--kubelet.socket", kubelet.socket_path, "--dcgm.url", dcgm.url])
        try:
            wait_until(lambda: 'pod="trainer"' in scrape(exporter).text, 15, 0.1, "trainer attributed")
            assert _vendor_served(exporter) == "nvidia"
            assert "vendor=nvidia" in exporter.wait_for_lines(CHOSEN)[0]
            assert "serving the GPU vendor chosen" not in exporter.stderr_text()
        finally:
            exporter.stop()


def test_a_node_that_shows_nothing_is_served_as_nvidia_until_amd_appears_then_switched_once(kubelet):
    exporter = _serve(kubelet)
    try:
        exporter.wait_for_log("no GPU vendor seen on this node yet: serving as nvidia")
        assert _vendor_served(exporter) == "nvidia"
        kubelet.set_allocatable(AMD_OFFERED)  # AMD's device plugin registers later than the exporter started
        wait_until(lambda: _vendor_served(exporter) == "amd", 15, 0.1, "switched to amd")
        exporter.wait_for_lines("serving the GPU vendor chosen", "vendor=amd", "replaced=nvidia")
        kubelet.set_allocatable([("nvidia.com/gpu", L4_UUID)])  # once decided, it stays, five refreshes on
        holds_throughout(lambda: _vendor_served(exporter) == "amd", 1.0, 0.1, describe="still amd")
        text = exporter.stderr_text()
        assert text.count(CHOSEN) == 1 and text.count("no GPU vendor seen") == 1
        assert text.count("serving the GPU vendor chosen") == 1 and _vendor_served(exporter) == "amd"
    finally:
        exporter.stop()
