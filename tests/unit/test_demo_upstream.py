"""The demo's simulated vendor exporter answers over real HTTP as the real ones do: a Content-Length by default,
or as promhttp (AMD's exporter) does, in chunks of 4 KiB at most and gzip-compressed for a client that asks."""

from __future__ import annotations

import gzip
import re
import socket
from typing import List, Tuple

from exporter.demo.fake_upstream import PROMHTTP_CHUNK_BYTES, FakeUpstreamExporter

BODY = b"".join(b'gpu_gfx_activity{gpu_id="%d",hostname="node"} %d\n' % (number, number % 100)
                for number in range(2000))  # 88 KB: some twenty chunks of 4 KiB


def raw_get(server: FakeUpstreamExporter, accept_encoding: str = "") -> Tuple[str, bytes]:
    """The answer's head and its body as it came on the wire, read off a plain socket until the server closes."""
    port = int(server.url.rsplit(":", 1)[1].split("/", 1)[0])
    extra = f"Accept-Encoding: {accept_encoding}\r\n" if accept_encoding else ""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(f"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n{extra}\r\n".encode())
        received = b""
        while True:
            data = connection.recv(65536)
            if not data:
                break
            received += data
    head, _, wire = received.partition(b"\r\n\r\n")
    return head.decode("latin-1"), wire


def unchunked(wire: bytes) -> Tuple[bytes, List[int]]:
    """The data of a chunked body and its chunks' sizes; fails on broken framing."""
    data, sizes, position = b"", [], 0
    while True:
        size_line = re.compile(rb"([0-9a-f]+)\r\n").match(wire, position)
        assert size_line, wire[position : position + 20]
        size = int(size_line[1], 16)
        start = size_line.end()
        if size == 0:
            assert wire[start:] == b"\r\n"
            return data, sizes
        assert wire[start + size : start + size + 2] == b"\r\n"
        data, position = data + wire[start : start + size], start + size + 2
        sizes.append(size)


def test_by_default_an_answer_has_its_content_length():
    with FakeUpstreamExporter(BODY) as server:
        head, wire = raw_get(server, accept_encoding="gzip")
    assert f"Content-Length: {len(BODY)}" in head and "Transfer-Encoding" not in head and "gzip" not in head
    assert wire == BODY


def test_as_promhttp_an_answer_comes_in_chunks_of_4_kib_at_most():
    with FakeUpstreamExporter(BODY, promhttp=True) as server:
        head, wire = raw_get(server)
    assert "Transfer-Encoding: chunked" in head and "Content-Length" not in head and "Content-Encoding" not in head
    data, sizes = unchunked(wire)
    assert data == BODY
    assert max(sizes) == PROMHTTP_CHUNK_BYTES == 4096 and len(sizes) == -(-len(BODY) // 4096)


def test_as_promhttp_a_client_that_accepts_gzip_gets_gzip():
    with FakeUpstreamExporter(lambda: BODY, promhttp=True) as server:
        head, wire = raw_get(server, accept_encoding="gzip, identity")
    assert "Transfer-Encoding: chunked" in head and "Content-Encoding: gzip" in head
    data, sizes = unchunked(wire)
    assert gzip.decompress(data) == BODY and max(sizes) <= 4096
