"""Request limits of the real exporter process: no bodies, bounded request heads, slow clients cut off."""

from __future__ import annotations

import socket
import threading
import time
from typing import List, Optional

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from exporter.web.handler import REQUEST_HEAD_MAX_BYTES, REQUEST_HEAD_TIMEOUT_SECONDS
from support.scrape_checks import L4_UUID, scrape

# A slow client gets this long to be cut off (the head deadline plus ample slack for a busy machine);
# the test fails, rather than hangs, if it is not.
TRICKLE_LIMIT_SECONDS = REQUEST_HEAD_TIMEOUT_SECONDS + 20


@pytest.fixture
def exporter(kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    return run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path])


def connect(exporter) -> socket.socket:
    host, port = exporter.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def exchange(exporter, request: bytes) -> bytes:
    """Send raw bytes; return everything the exporter answers until it closes the connection."""
    with connect(exporter) as conn:
        conn.sendall(request)
        return read_until_closed(conn)


def read_until_closed(conn: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = conn.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1."), answer[:200]
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("framing", [b"Content-Length: 5\r\n\r\nhello", b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"])
def test_request_bodies_are_refused_and_the_connection_closed(exporter, framing):
    answer = exchange(exporter, b"GET /gpu/metrics HTTP/1.1\r\nHost: x\r\n" + framing)
    assert status_of(answer) == 400
    assert b"Connection: close" in answer and b"DCGM_" not in answer


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
def test_only_get_and_head(exporter, method):
    response = requests.request(method, exporter.url(), timeout=10)
    assert response.status_code == 405 and response.headers["Allow"] == "GET, HEAD"


def test_unknown_methods_and_paths(exporter):
    assert status_of(exchange(exporter, b"BREW /gpu/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 501
    assert requests.get(exporter.url("/gpu/metrics/../../etc/passwd"), timeout=10).status_code == 404
    head = requests.head(exporter.url(), timeout=10)
    assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize("head", [
    pytest.param(b"GET /gpu/metrics?" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", id="request-line-70KiB"),
    pytest.param(b"GET /gpu/metrics HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", id="one-header-70KiB"),
    pytest.param(b"GET /gpu/metrics HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(120)) + b"\r\n",
                 id="120-headers"),
    pytest.param(b"GET /gpu/metrics HTTP/1.1\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"a" * 1000) for i in range(90))
                 + b"\r\n", id="90-headers-of-1KiB"),  # each within http.server's limits, the sum is not
])
def test_oversized_request_heads_are_refused(exporter, head):
    assert len(head) > REQUEST_HEAD_MAX_BYTES or head.count(b"\r\n") > 100
    assert status_of(exchange(exporter, head)) in (414, 431)
    assert scrape(exporter).status_code == 200


def test_normal_head_just_under_the_limit_is_served(exporter):
    head = b"GET /gpu/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + b"a" * 30_000 + b"\r\n\r\n"
    assert status_of(exchange(exporter, head)) == 200


def trickle(exporter, outcome: List[Optional[float]], index: int) -> None:
    """A slowloris client: a request line, then one header byte per second, until cut off."""
    started = time.monotonic()
    with connect(exporter) as conn:
        conn.sendall(b"GET /gpu/metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        conn.settimeout(1.0)  # doubles as the pace: wait up to a second for the server to hang up
        while time.monotonic() - started < TRICKLE_LIMIT_SECONDS:
            try:
                conn.sendall(b"a")
                if conn.recv(1024) == b"":
                    break  # closed by the exporter without an answer
            except socket.timeout:
                continue  # still open: send the next byte
            except (BrokenPipeError, ConnectionResetError):
                break
        else:
            return  # never cut off: outcome stays None
    outcome[index] = time.monotonic() - started


def test_slow_clients_are_cut_off_without_blocking_scrapes(exporter):
    outcome: List[Optional[float]] = [None] * 20
    clients = [threading.Thread(target=trickle, args=(exporter, outcome, i)) for i in range(len(outcome))]
    for client in clients:
        client.start()
    scrapes = 0
    while any(client.is_alive() for client in clients):
        response = requests.get(exporter.url(), timeout=10)
        assert response.status_code == 200 and 'pod="p"' in response.text
        scrapes += 1
        time.sleep(0.2)
    for client in clients:
        client.join()
    assert all(seconds is not None for seconds in outcome), f"slow clients never cut off: {outcome}"
    assert all(seconds >= REQUEST_HEAD_TIMEOUT_SECONDS - 1 for seconds in outcome), outcome
    assert scrapes >= 5
