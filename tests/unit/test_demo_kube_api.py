"""The demo's Kubernetes API server ends a watch as a real one does when its timeoutSeconds runs out: a whole
chunked answer, the connection kept open for the next request, so a client watching again on it at once
(as the exporter's does, through the same client library) never reads "Server disconnected"."""

from __future__ import annotations

import http.client
import select

import pytest

from exporter.demo.kube_api import FakeKubeApi
from exporter.demo.kube_objects import make_pod

SHORT_WATCH = "0.2"  # timeoutSeconds: the server ends each watch after 200 ms, not 290 s


@pytest.fixture
def api():
    server = FakeKubeApi().start()
    server.put("v1", "pods", make_pod("ml", "trainer-0", "demo-node"))
    yield server
    server.stop()


def test_a_watch_ended_by_its_timeout_is_a_whole_answer_on_a_connection_kept_open(api):
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
    try:
        connection.request("GET", f"/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds={SHORT_WATCH}")
        watched = connection.getresponse()
        lines = watched.read().splitlines()  # http.client raises IncompleteRead on a cut chunked body
        assert watched.status == 200 and b'"ADDED"' in lines[0] and watched.getheader("Connection") is None
        # A server closing now, having announced nothing, makes the socket readable (its end of file).
        readable, _, _ = select.select([connection.sock], [], [], 0.5)
        assert not readable, "the server closed the connection after a whole watch answer, unannounced"
        connection.request("GET", "/api/v1/pods")  # the next request, on the same connection
        listed = connection.getresponse()
        assert listed.status == 200 and b"trainer-0" in listed.read()
    finally:
        connection.close()


def test_watching_again_at_once_through_the_exporters_client_library_never_finds_the_server_gone(api):
    from lightkube.core.generic_client import httpx  # what the exporter's Kubernetes client sends with

    params = {"watch": "1", "resourceVersion": "0", "timeoutSeconds": SHORT_WATCH}
    with httpx.Client(base_url=api.url, timeout=5) as client:
        for _ in range(20):
            with client.stream("GET", "/api/v1/pods", params=params) as watched:
                assert watched.status_code == 200 and b"trainer-0" in b"".join(watched.iter_bytes())


def test_a_stopped_server_answers_nothing_on_a_connection_kept_open():
    server = FakeKubeApi().start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", "/api/v1/pods")
        assert connection.getresponse().read()
        server.stop()
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            connection.request("GET", "/api/v1/pods")
            connection.getresponse()
    finally:
        connection.close()
