"""An upstream out of step with its requests, against the real exporter process: a dcgm-exporter that sends, a
moment after each answer, a second one nobody asked for. Whenever that second answer arrives, it is never
served as the answer to the next scrape."""

from __future__ import annotations

import re
import socket
import time

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.raw_tcp import RawTcpServer, http_answer
from support.scrape_checks import L4_UUID

GOOD = b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="%s"} 40\n' % L4_UUID.encode()
STRAY = b'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="%s"} 99999\n' % L4_UUID.encode()
SCRAPES = 30


def _stray_answers(delay: float):
    """An HTTP/1.1 server that answers each request, then `delay` seconds later sends a second answer, in a
    write of its own, on the same connection (and ignores any "Connection: close")."""

    def serve(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    if not conn.recv(65536):
                        return
                    server.requests += 1
                    conn.sendall(http_answer(GOOD))
                    time.sleep(delay)
                    conn.sendall(http_answer(STRAY))
                except OSError:
                    return

    server = RawTcpServer(serve, "/metrics")
    server.requests = 0
    return server


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.05])
def test_a_stray_answer_is_never_served_whenever_it_arrives(kubelet, run_exporter, delay):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    upstream = _stray_answers(delay)
    try:
        exporter = run_exporter(["--dcgm.url", upstream.url, "--kubelet.socket", kubelet.socket_path])
        strays = 0
        for _ in range(SCRAPES):  # back to back: the next request is often sent before the stray answer comes
            served = requests.get(exporter.url(), timeout=30).text
            assert re.search(r"(?m)^pod_gpu_exporter_dcgm_up 1$", served), served
            strays += "99999" in served
            assert re.search(r"(?m)^DCGM_FI_DEV_GPU_TEMP\{.*\} 40$", served) or "99999" in served, served
        assert strays == 0, f"{strays} of {SCRAPES} scrapes served the answer nobody asked for"
        assert upstream.requests >= SCRAPES
    finally:
        upstream.close()
