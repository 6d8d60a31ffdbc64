"""A Prometheus URL answered by something that is not HTTP, or by a connection cut mid-answer: one line, exit 1."""

from __future__ import annotations

import io
import socket

import pytest

from exporter.top.command import run_top
from support.raw_tcp import RawTcpServer


def _read_request(conn: socket.socket) -> None:
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk


def _garbage(conn: socket.socket) -> None:
    """An SSH server's greeting where an HTTP status line belongs."""
    with conn:
        _read_request(conn)
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\nProtocol mismatch.\r\n")


def _cut_mid_body(conn: socket.socket) -> None:
    """Headers promising 1000 bytes of JSON, 20 of them, then the connection closed."""
    with conn:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                     b'{"status":"success",')


def _closed_before_answering(conn: socket.socket) -> None:
    with conn:
        _read_request(conn)


@pytest.mark.parametrize("handle, words", [(_garbage, "BadStatusLine"), (_cut_mid_body, "IncompleteRead"),
                                           (_closed_before_answering, "")])
def test_a_broken_answer_is_one_line_and_exit_1(handle, words):
    server = RawTcpServer(handle)
    url = server.url
    out, err = io.StringIO(), io.StringIO()
    try:
        code = run_top(["--prometheus", url, "--prometheus.timeout", "5s"], environ={}, out=out, err=err)
    finally:
        server.close()
    assert code == 1 and out.getvalue() == "", err.getvalue()
    assert len(err.getvalue().splitlines()) == 1, err.getvalue()
    assert err.getvalue().startswith(f"pod-gpu-metrics-exporter top: error: Prometheus at {url} ")
    assert words in err.getvalue()
