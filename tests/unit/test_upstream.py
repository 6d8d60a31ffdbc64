"""Tests of exporter.vendors.nvidia.dcgm.http_source against a real HTTP dcgm-exporter stand-in and real files."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from typing import Callable, List

import pytest

from exporter.base.errors import UpstreamError
from exporter.demo.fake_upstream import chunked_wire
from exporter.vendors.nvidia.collectors.dcgm import parse_dcgm_url
from exporter.vendors.nvidia.dcgm import DEFAULT_MAX_BODY_BYTES
from exporter.vendors.nvidia.dcgm.file_source import FileSource
from exporter.vendors.nvidia.dcgm.http_source import HttpSource
from exporter.vendors.nvidia.dcgm.options import DcgmFileOptions, DcgmHttpOptions
from support.fake_dcgm import FakeDcgmExporter
from support.fixtures import fixture_bytes, fixture_path  # tests/ is on sys.path (conftest.py)

L4 = "dcgm/l4-aws-gpu-operator-default-counters.prom"
LEGACY = "legacy/dcgm.prom"


@pytest.fixture
def l4_body() -> bytes:
    return fixture_bytes(L4)


@pytest.fixture
def fake(l4_body):
    with FakeDcgmExporter(l4_body) as server:
        yield server


def http_source(url: str, timeout_seconds: float, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> HttpSource:
    """An HttpSource as `serve` makes one: its --dcgm.url read by the config."""
    return HttpSource(DcgmHttpOptions(parse_dcgm_url(url), timeout_seconds, max_bytes))


def fetch_error(source) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        source.fetch()
    return caught.value


class RawHttpServer:
    """A loopback server answering each connection with `respond(conn, stopped)`: raw bytes, any pace."""

    def __init__(self, respond: Callable[[socket.socket, threading.Event], None]) -> None:
        self._respond = respond
        self.stopped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.requests_seen: List[bytes] = []
        self._threads: List[threading.Thread] = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/metrics"

    def _accept_loop(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            request = b""
            try:
                while b"\r\n\r\n" not in request:
                    piece = conn.recv(4096)
                    if not piece:
                        return
                    request += piece
                self.requests_seen.append(request)
                self._respond(conn, self.stopped)
            except OSError:
                pass  # the client hung up, which is what several tests make it do

    def stop(self) -> None:
        self.stopped.set()
        for thread in list(self._threads):
            thread.join(timeout=10)
        self._listener.close()


@pytest.fixture
def raw_server():
    servers: List[RawHttpServer] = []

    def start(respond) -> RawHttpServer:
        servers.append(RawHttpServer(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def canned(head: bytes, body: bytes) -> Callable[[socket.socket, threading.Event], None]:
    def respond(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(head + body)
    return respond


def gzip_response(gzipped: bytes) -> Callable[[socket.socket, threading.Event], None]:
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(gzipped))
    return canned(head, gzipped)


# --- HTTP -------------------------------------------------------------------------------------


def test_http_body_is_byte_exact(fake, l4_body):
    source = http_source(fake.url, timeout_seconds=5)
    assert source.fetch() == l4_body
    assert source.fetch() == l4_body  # again, over a connection of its own
    assert fake.requests == 2
    assert source.describe() == fake.url


def test_http_chunked_answer_like_go_is_byte_exact_every_time(fake, l4_body):
    """The real dcgm-exporter (Go's net/http, one large write, no length) answers chunked."""
    fake.chunked = True
    source = http_source(fake.url, timeout_seconds=5)
    assert [source.fetch(), source.fetch()] == [l4_body, l4_body]
    assert fake.requests == 2


@pytest.mark.parametrize("chunk_bytes", [4096, 1, 777])
def test_http_answer_in_many_small_chunks_like_promhttp_is_byte_exact(fake, l4_body, chunk_bytes):
    """client_golang's promhttp (AMD's exporter) writes through a 4 KiB buffer: one chunk per write."""
    fake.chunked, fake.chunk_bytes = True, chunk_bytes
    fake.body = l4_body * 40  # 314 KB: past one 256 KiB read block
    source = http_source(fake.url, timeout_seconds=10)
    assert source.fetch() == l4_body * 40
    assert source.fetch() == l4_body * 40


def chunked_response(wire_body: bytes, encoding: bytes = b"") -> Callable[[socket.socket, threading.Event], None]:
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nTransfer-Encoding: chunked\r\n"
            + (b"Content-Encoding: %s\r\n" % encoding if encoding else b"") + b"Connection: close\r\n\r\n")
    return canned(head, wire_body)


def kept_open(head: bytes, body: bytes) -> Callable[[socket.socket, threading.Event], None]:
    """The whole answer in one write, then the connection held open (a server ignoring "Connection: close")."""
    def respond(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(head + body)
        stopped.wait(30)
    return respond


@pytest.mark.parametrize("framing, encoding", [("chunked", None), ("chunked", "gzip"), ("sized", "gzip")])
def test_http_whole_answer_on_a_connection_left_open_is_not_waited_past(raw_server, framing, encoding):
    """A small answer arrives with its headers, into the reader's buffer; nothing more ever comes, and the
    connection stays open. The body is complete: the fetch must not wait on the socket for more."""
    body = b"a 1\nb 2\n"
    payload = gzip.compress(body) if encoding else body
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + (b"Content-Encoding: gzip\r\n" if encoding else b"")
    if framing == "chunked":
        head, payload = head + b"Transfer-Encoding: chunked\r\n\r\n", chunked_wire(payload, 4)
    else:
        head += b"Content-Length: %d\r\n\r\n" % len(payload)
    server = raw_server(kept_open(head, payload))
    assert http_source(server.url, timeout_seconds=3).fetch() == body  # waiting would end in a timeout error


def test_http_gzip_answer_in_small_chunks_is_decoded(raw_server, l4_body):
    server = raw_server(chunked_response(chunked_wire(gzip.compress(l4_body), 100), b"gzip"))
    assert http_source(server.url, timeout_seconds=5).fetch() == l4_body


def test_http_cap_holds_for_an_answer_in_small_chunks(raw_server, l4_body):
    server = raw_server(chunked_response(chunked_wire(l4_body, 4096)))
    error = fetch_error(http_source(server.url, timeout_seconds=5, max_bytes=len(l4_body) - 1))
    assert error.reason == "too_large"


def test_http_chunked_answer_cut_mid_chunk_is_truncated_with_what_came(raw_server, l4_body):
    wire = chunked_wire(l4_body * 4, 4096)
    framed_chunk = len(b"1000\r\n") + 4096 + len(b"\r\n")
    assert len(wire) > 5 * framed_chunk
    server = raw_server(chunked_response(wire[: 4 * framed_chunk + 100]))  # four whole chunks and part of a fifth
    error = fetch_error(http_source(server.url, timeout_seconds=5))
    assert error.reason == "truncated"
    assert f"after {4 * 4096 + 100 - 6} bytes" in str(error)  # the data, without the fifth size line


def test_http_broken_chunk_framing_is_an_error_that_names_the_flag(raw_server):
    server = raw_server(chunked_response(b"5\r\nhello\r\nnot-hex\r\n\r\n"))
    error = fetch_error(http_source(server.url, timeout_seconds=5))
    assert error.reason == "error"
    assert "malformed chunk size line" in str(error) and "--dcgm.url" in str(error)


def test_http_chunked_answers_that_shrink_and_grow_are_byte_exact(fake, l4_body):
    """Each chunked answer is read into a buffer sized from the last one: a shorter answer after a
    longer one must not keep the longer one's tail, nor a longer one lose its own."""
    fake.chunked = True
    bodies = [l4_body, l4_body[: len(l4_body) // 3], b"", l4_body + l4_body, l4_body[:100]]
    pending = iter(bodies)
    fake.body = lambda: next(pending)
    source = http_source(fake.url, timeout_seconds=5)
    got = [source.fetch() for _ in range(2)]
    with pytest.raises(UpstreamError):  # an empty answer is an error, and resizes nothing
        source.fetch()
    got += [source.fetch() for _ in range(2)]
    assert got == [body for body in bodies if body]


def test_http_answer_past_the_cap_after_one_under_it_is_too_large(fake, l4_body):
    fake.chunked = True
    pending = iter([l4_body, l4_body + b"# one more line\n"])
    fake.body = lambda: next(pending)
    source = http_source(fake.url, timeout_seconds=5, max_bytes=len(l4_body))
    assert source.fetch() == l4_body  # the next buffer is sized past it, but the cap still holds
    assert fetch_error(source).reason == "too_large"


def test_http_render_delay_is_waited_for(fake, l4_body):
    fake.render_seconds = 0.2
    source = http_source(fake.url, timeout_seconds=5)
    started = time.monotonic()
    assert source.fetch() == l4_body
    assert time.monotonic() - started >= 0.2


def test_http_callable_body_is_called_per_request(fake):
    bodies = iter([b"a 1\n", b"a 2\n"])
    fake.body = lambda: next(bodies)
    source = http_source(fake.url, timeout_seconds=5)
    assert [source.fetch(), source.fetch()] == [b"a 1\n", b"a 2\n"]


def test_http_500_is_reason_status(fake):
    fake.status = 500
    error = fetch_error(http_source(fake.url, timeout_seconds=5))
    assert error.reason == "status"
    assert "500" in str(error) and fake.url in str(error)


def test_http_wrong_path_is_reason_status(fake):
    error = fetch_error(http_source(fake.url.replace("/metrics", "/gpu/metrics"), timeout_seconds=5))
    assert error.reason == "status" and "404" in str(error)


def test_http_stopped_server_is_refused_then_back(fake, l4_body):
    source = http_source(fake.url, timeout_seconds=5)
    assert source.fetch() == l4_body
    fake.stop()
    error = fetch_error(source)
    assert error.reason == "refused"
    assert fake.url in str(error)
    fake.start()  # same port again
    assert source.fetch() == l4_body


def test_http_hang_times_out(fake):
    fake.fault = "hang"
    error = fetch_error(http_source(fake.url, timeout_seconds=0.5))
    assert error.reason == "timeout"
    assert "0.5s" in str(error)


def test_http_slow_drip_is_cut_by_the_total_deadline(raw_server):
    # A byte every 20 ms never trips a per-read timeout of 0.5 s; only a total deadline stops it.
    # Without one this fetch would read for 3 s and then fail as "truncated", not "timeout".
    def drip(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(150):
            if stopped.wait(0.02):
                return
            conn.sendall(b"#")

    server = raw_server(drip)
    error = fetch_error(http_source(server.url, timeout_seconds=0.5))
    assert error.reason == "timeout"


def test_http_body_over_cap_is_too_large(fake, l4_body):
    error = fetch_error(http_source(fake.url, timeout_seconds=5, max_bytes=len(l4_body) - 1))
    assert error.reason == "too_large"
    assert http_source(fake.url, timeout_seconds=5, max_bytes=len(l4_body)).fetch() == l4_body


def test_http_headers_trickled_in_cannot_stretch_the_fetch_past_its_deadline(raw_server):
    # Each header line comes well within the timeout, but all of them together take far longer.
    def respond(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for number in range(40):
            if stopped.wait(0.1):
                return
            conn.sendall(b"X-Slow-%d: y\r\n" % number)

    server = raw_server(respond)
    started = time.monotonic()
    error = fetch_error(http_source(server.url, timeout_seconds=1))
    assert error.reason == "timeout"
    assert time.monotonic() - started < 3.5  # not 40 header reads of up to 1 s each


def test_http_declared_length_over_cap_is_refused_without_reading(raw_server):
    # The body never comes: reading it would end in "timeout", so "too_large" proves we did not read.
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 52428800\r\n\r\n"

    def respond(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(head)
        stopped.wait(10)

    server = raw_server(respond)
    error = fetch_error(http_source(server.url, timeout_seconds=5, max_bytes=1024 * 1024))
    assert error.reason == "too_large"


def test_http_undeclared_length_over_cap_is_too_large(raw_server):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    server = raw_server(canned(head, b"x 1\n" * 5000))
    error = fetch_error(http_source(server.url, timeout_seconds=5, max_bytes=10000))
    assert error.reason == "too_large"


def test_http_gzip_is_decoded(raw_server, l4_body):
    server = raw_server(gzip_response(gzip.compress(l4_body)))
    assert http_source(server.url, timeout_seconds=5).fetch() == l4_body


def test_http_concatenated_gzip_members_are_decoded(raw_server, l4_body):
    half = len(l4_body) // 2
    server = raw_server(gzip_response(gzip.compress(l4_body[:half]) + gzip.compress(l4_body[half:])))
    assert http_source(server.url, timeout_seconds=5).fetch() == l4_body


def test_http_gzip_cap_applies_to_decoded_bytes(raw_server):
    bomb = gzip.compress(b"\0" * (4 * 1024 * 1024))  # a few KiB on the wire
    server = raw_server(gzip_response(bomb))
    error = fetch_error(http_source(server.url, timeout_seconds=5, max_bytes=64 * 1024))
    assert len(bomb) < 64 * 1024
    assert error.reason == "too_large"


def test_http_cut_gzip_stream_is_truncated(raw_server, l4_body):
    compressed = gzip.compress(l4_body)
    server = raw_server(gzip_response(compressed[: len(compressed) // 2]))
    assert fetch_error(http_source(server.url, timeout_seconds=5)).reason == "truncated"


def test_http_asks_for_the_text_format_uncompressed(raw_server):
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\n"
    server = raw_server(canned(head, b"a 1\n"))
    assert http_source(server.url, timeout_seconds=5).fetch() == b"a 1\n"
    request = server.requests_seen[0].lower()
    assert b"\r\naccept: text/plain\r\n" in request
    assert b"\r\naccept-encoding: identity\r\n" in request


def test_http_fault_empty_is_reason_empty(fake):
    fake.fault = "empty"
    assert fetch_error(http_source(fake.url, timeout_seconds=5)).reason == "empty"


def test_http_fault_truncate_is_reason_truncated(fake):
    fake.fault = "truncate"
    error = fetch_error(http_source(fake.url, timeout_seconds=5))
    assert error.reason == "truncated"
    assert fake.url in str(error)


def test_http_fault_garbage_is_passed_on_for_the_parser_to_judge(fake, l4_body):
    fake.fault = "garbage"
    source = http_source(fake.url, timeout_seconds=5)
    first, second = source.fetch(), source.fetch()
    assert len(first) == len(second) == 4096 and first != second and first != l4_body[:4096]
    fake.fault = None
    assert source.fetch() == l4_body


def test_http_recovers_after_each_fault(fake, l4_body):
    source = http_source(fake.url, timeout_seconds=0.5)
    for fault in ("hang", "empty", "truncate"):
        fake.fault = fault
        fetch_error(source)
        fake.fault = None
        assert source.fetch() == l4_body


def test_http_twenty_concurrent_fetches_are_byte_exact(fake, l4_body):
    source = http_source(fake.url, timeout_seconds=10)
    start = threading.Barrier(20)
    results: List[object] = [None] * 20

    def scrape(index: int) -> None:
        start.wait()
        try:
            results[index] = source.fetch()
        except UpstreamError as error:  # reported below rather than lost in the thread
            results[index] = error

    threads = [threading.Thread(target=scrape, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [l4_body] * 20
    assert fake.requests == 20


def test_fake_rejects_unknown_fault(fake):
    with pytest.raises(ValueError):
        fake.fault = "explode"


# --- textfile ---------------------------------------------------------------------------------


def test_file_legacy_textfile_is_byte_exact():
    source = FileSource(DcgmFileOptions(str(fixture_path(LEGACY))))
    assert source.fetch() == fixture_bytes(LEGACY)
    assert source.describe() == str(fixture_path(LEGACY))


def test_file_missing_is_reason_absent(tmp_path):
    path = tmp_path / "dcgm.prom"
    error = fetch_error(FileSource(DcgmFileOptions(str(path))))
    assert error.reason == "absent"
    assert str(path) in str(error) and "mounted" in str(error)
    path.write_bytes(b"dcgm_gpu_temp{gpu=\"0\",uuid=\"GPU-1\"} 40\n")
    assert FileSource(DcgmFileOptions(str(path))).fetch().startswith(b"dcgm_gpu_temp")


def test_file_empty_is_reason_empty(tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_bytes(b"")
    assert fetch_error(FileSource(DcgmFileOptions(str(path)))).reason == "empty"


def test_file_over_cap_is_too_large(tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_bytes(fixture_bytes(LEGACY))
    assert fetch_error(FileSource(DcgmFileOptions(str(path), max_body_bytes=100))).reason == "too_large"


def test_file_cut_without_final_newline_is_truncated(tmp_path):
    # What a reader sees while an in-place write() is stalled part way: stable size, cut line.
    path = tmp_path / "dcgm.prom"
    path.write_bytes(fixture_bytes(LEGACY)[:4096])
    error = fetch_error(FileSource(DcgmFileOptions(str(path))))
    assert error.reason == "truncated" and str(path) in str(error)


def test_file_rewritten_in_place_is_never_read_torn(tmp_path):
    # Two versions of the same size, like a writer that truncates and rewrites the file every
    # interval: every successful read must be exactly one of them.
    legacy = fixture_bytes(LEGACY) * 20
    versions = [legacy.replace(b" 3", b" 4"), legacy.replace(b" 3", b" 5")]
    assert len(versions[0]) == len(versions[1]) and versions[0] != versions[1]
    path = tmp_path / "dcgm.prom"
    path.write_bytes(versions[0])
    stop = threading.Event()
    writes = []

    def rewrite_in_place() -> None:
        while not stop.is_set():
            with open(path, "wb") as handle:  # truncates, then writes: the torn-read hazard
                handle.write(versions[len(writes) % 2])
            writes.append(1)

    writer = threading.Thread(target=rewrite_in_place)
    writer.start()
    # A writer that never pauses never leaves the file settled, so a read that catches a whole version
    # waits for it to settle and then gives up (`timeout`): a short timeout keeps that wait short.
    source, outcomes = FileSource(DcgmFileOptions(str(path), timeout_seconds=1.5)), []
    give_up_at = time.monotonic() + 4.0
    try:
        while len(outcomes) < 80 and time.monotonic() < give_up_at:
            try:
                data = source.fetch()
                outcomes.append("whole")
                assert data in versions, "a torn read was returned"
            except UpstreamError as error:
                assert error.reason in ("truncated", "empty", "timeout")
                outcomes.append(error.reason)
    finally:
        stop.set()
        writer.join()
    print(f"in-place rewrites: {len(writes)}, reads: " + ", ".join(
        f"{outcome}={outcomes.count(outcome)}" for outcome in sorted(set(outcomes))))
    assert source.fetch() == versions[(len(writes) - 1) % 2]
