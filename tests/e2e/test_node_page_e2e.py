"""The node page at /, from the real process: the demo's node as a person (and a real browser) reads it,
and a page view that asks dcgm-exporter for nothing."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
import requests

from exporter.vendors.nvidia.demo.nvml import LOST_AFTER_SECONDS
from exporter.vendors.nvidia.demo.workload import gpu_uuid
from exporter.sources.kubelet import AllocatedDevice
from support.browser import INSTALL_HINT, dump_dom, find_chromium
from support.demo_process import node_page_told, start_demo
from support.deploy_tools import missing_tool
from support.waiting import wait_until

L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"  # the L4 of the dcgm fixture
PODS = ("ml-team/ trainer-0 /pytorch", "inference/ llm-server-a /vllm", "inference/ llm-server-b /vllm")


class _Text(HTMLParser):
    def __init__(self, html: str):
        super().__init__()
        self.parts = []
        self.feed(html)

    def handle_data(self, data):
        self.parts.append(data)


def text_of(html: str) -> str:
    """The page's text with its whitespace folded, as it reads (a <wbr> is a place to wrap, not a space)."""
    return re.sub(r"\s+", " ", " ".join(_Text(html.replace("<wbr>", "")).parts))


@pytest.fixture(scope="module")
def demo():
    """The demo once GPU 3 is lost and the shares are in, after one scrape of /gpu/metrics."""
    process = start_demo()
    try:
        def page() -> str:
            return requests.get(process.url("/"), timeout=10).text

        wait_until(lambda: "pod_gpu_container_sm_utilization_ratio{" in requests.get(process.url(), timeout=10).text,
                   timeout_seconds=30, describe="the first per-process shares")
        wait_until(lambda: node_page_told(page()), timeout_seconds=LOST_AFTER_SECONDS + 20,
                   describe="GPU 3 lost, the XID events registered again and notebook-7's use on the node page")
        yield process
    finally:
        assert process.stop() == 0


def _assert_reads_as_the_demo_node(text: str) -> None:
    for pod in PODS:
        assert pod in text, pod
    assert "research/ notebook-7 /jupyter" in text.split("Used without being held")[1]
    for index in range(4):
        assert gpu_uuid(index) in text
    assert "NVIDIA L4" in text
    gpu1 = text.split(gpu_uuid(1))[1].split(gpu_uuid(2))[0]
    assert "unhealthy" in gpu1
    assert f"Lost GPUs GPU 3 {gpu_uuid(3)}: NVML reports it lost" in text
    assert "gpu.nvidia.com/unmonitored" in text.split(gpu_uuid(3))[1]
    assert f"Held by nobody GPU 3 {gpu_uuid(3)}" in text
    for source in ("kubelet", "dcgm", "kubernetes", "process_shares", "xid_events"):
        assert re.search(rf"\b{source} up \d+ s\b|\b{source} up —", text), source


def test_the_demo_page_shows_its_gpus_holders_health_lost_gpu_and_sources(demo):
    response = requests.get(demo.url("/"), timeout=10)
    assert response.status_code == 200 and response.headers["Content-Type"] == "text/html; charset=utf-8"
    html = response.text
    _assert_reads_as_the_demo_node(text_of(html))
    assert '<meta http-equiv="refresh" content="10">' in html
    assert "<script" not in html and "src=" not in html and "://" not in html  # nothing from another host
    for path in ("/gpu/metrics", "/metrics", "/healthz"):
        assert f'href="{path}"' in html


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium: a skip with one line without it, a failure under CI (which installs it)."""
    path = find_chromium()
    if path is None:
        missing_tool("`chromium`", INSTALL_HINT)
    return path


def test_a_real_browser_reads_the_demo_page(chromium, demo):
    dom = dump_dom(chromium, demo.url("/"))
    assert dom.startswith("<!DOCTYPE html>\n<html")  # the browser's serialisation of the DOM it built
    _assert_reads_as_the_demo_node(text_of(dom))


def test_a_page_view_asks_dcgm_exporter_for_nothing(socket_dir, kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ml", "trainer-0", "pytorch", "nvidia.com/gpu", L4_UUID)])
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])
    # The page never waits for the kubelet's first answer: it says what is known when it is asked.
    first = wait_until(lambda: (lambda text: text if "ml/ trainer-0 /pytorch" in text else "")(
        text_of(requests.get(exporter.url("/"), timeout=10).text)), timeout_seconds=15, describe="the mapping")
    assert "dcgm down — not fetched yet" in first
    assert dcgm.requests == 0
    assert requests.get(exporter.url(), timeout=10).status_code == 200
    assert dcgm.requests == 1
    for _ in range(5):
        page = text_of(requests.get(exporter.url("/"), timeout=10).text)
        assert "NVIDIA L4" in page and "ml/ trainer-0 /pytorch 100 %" in page
    assert dcgm.requests == 1
