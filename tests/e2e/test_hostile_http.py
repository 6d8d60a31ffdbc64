"""Hostile conditions, serving side: the real exporter process against idle, slow and odd clients, and a web
config that changes under it."""

from __future__ import annotations

import gzip
import re
import shutil
import socket
import ssl
import tempfile
import time
from pathlib import Path

import bcrypt
import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from exporter.web.handler import REQUEST_TIMEOUT_SECONDS
from exporter.web.server import MAX_CONNECTIONS, TLS_HANDSHAKE_TIMEOUT_SECONDS
from support.exporter_process import start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes
from support.scrape_checks import L4_UUID
from support.socket_states import all_accepted, all_read
from support.tlspki import OPENSSL, SKIP_REASON, _new_leaf, make_pki
from support.waiting import wait_until

L4 = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason=SKIP_REASON)


@pytest.fixture
def exporter(kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    return run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--dcgm.timeout", "3s"])


def connect(exporter) -> socket.socket:
    host, port = exporter.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def port_of(exporter) -> int:
    return int(exporter.address.rsplit(":", 1)[1])


def counter(exporter, name: str) -> float:
    text = requests.get(exporter.url("/metrics"), timeout=10).text
    return float(re.search(rf"^{name}_total (\S+)$", text, re.MULTILINE).group(1))


def closed_by_peer(conn: socket.socket, timeout_seconds: float = 10) -> bool:
    conn.settimeout(timeout_seconds)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


# ---------------------------------------------------------------- 2. no lock-out


def test_idle_connections_never_lock_out_scrapes_or_healthz(exporter):
    idle = [connect(exporter) for _ in range(MAX_CONNECTIONS)]
    try:
        wait_until(lambda: all_accepted(port_of(exporter)), describe="every idle connection accepted: each holds a slot")
        started = time.monotonic()
        assert requests.get(exporter.url("/healthz"), timeout=10).status_code == 200
        assert 'pod="p"' in requests.get(exporter.url(), timeout=10).text
        assert time.monotonic() - started < 5
        assert closed_by_peer(idle[0]), "the longest-idle connection should have made room"
        assert counter(exporter, "pod_gpu_exporter_http_idle_connections_closed") >= 1
    finally:
        for conn in idle:
            conn.close()


def refused_at_once(exporter) -> bool:
    """Whether a new connection is closed straight away (else it is let go again). Straight away is
    well within REQUEST_TIMEOUT_SECONDS, for which an admitted connection waits for its request: a
    loaded machine can take longer than half a second to accept and close it."""
    with connect(exporter) as conn:
        try:
            return closed_by_peer(conn, REQUEST_TIMEOUT_SECONDS / 6)
        except socket.timeout:
            return False


def test_when_every_slot_is_answering_new_connections_are_refused_warned_and_counted(kubelet, dcgm, run_exporter):
    kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
    # Every scrape waits for the hanging dcgm-exporter until the test stops it: the slots stay busy
    # for as long as the probes take, not only for a --dcgm.timeout that a loaded machine could outlast.
    exporter = run_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path, "--dcgm.timeout", "60s"])
    dcgm.fault = "hang"
    busy = [connect(exporter) for _ in range(MAX_CONNECTIONS)]
    try:
        for conn in busy:
            conn.sendall(b"GET /gpu/metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        # Once every connection's thread has read its request (a few ms), no slot is idle any more. Not
        # polled with probes, which would take the place of a connection still idle: the kernel says.
        wait_until(lambda: dcgm.requests >= 1)
        wait_until(lambda: all_read(port_of(exporter), busy), describe="every request read by the exporter")
        assert [refused_at_once(exporter) for _ in range(4)] == [True] * 4
        dcgm.stop()  # the hanging fetch fails
        for conn in busy:  # the scrapes themselves still end with an answer (dcgm_up 0)
            conn.settimeout(20)
            assert conn.recv(12).startswith(b"HTTP/1.1 200")
    finally:
        for conn in busy:
            conn.close()
    warnings = exporter.wait_for_lines("level=warn", "connection slots")
    assert len(warnings) == 1, "refusals are warned once per interval, not once each"
    assert counter(exporter, "pod_gpu_exporter_http_connections_refused") >= 4


# ---------------------------------------------------------------- 7. Accept-Encoding (RFC 9110)


@pytest.mark.parametrize("header, gzipped", [
    ("gzip", True), ("GZIP", True), ("gzip;Q=0", False), ("gzip; q=0.000", False), ("*, gzip;q=0", False),
    ("gzip;q=0, *", False), ("*;q=0.5", True), ("*;q=0", False), ("identity", False), ("br, gzip;q=0.1", True),
    ("x-gzip", True), ("", False),
])
def test_accept_encoding_follows_rfc_9110(exporter, header, gzipped):
    response = requests.get(exporter.url(), headers={"Accept-Encoding": header}, stream=True, timeout=10)
    raw = response.raw.read(decode_content=False)
    assert (response.headers.get("Content-Encoding") == "gzip") == gzipped
    text = gzip.decompress(raw) if gzipped else raw
    assert b'pod="p"' in text


# ---------------------------------------------------------------- TLS: handshakes and re-read config


@pytest.fixture
def secured():
    """An exporter with TLS + basic auth from a web config in a temp folder; (exporter, folder)."""
    folder = Path(tempfile.mkdtemp(prefix="pgx-hostile-", dir="/tmp"))
    make_pki(folder)
    write_config(folder, users={"prom": "first"})
    with FakeKubelet(str(folder / "kubelet.sock")) as kubelet, FakeDcgmExporter(L4) as dcgm:
        kubelet.set_devices([AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", L4_UUID)])
        exporter = start_exporter(["--web.config.file", str(folder / "web.yml"), "--kubelet.socket",
                                   kubelet.socket_path, "--dcgm.url", dcgm.url])
        try:
            yield exporter, folder
        finally:
            exporter.stop()
            shutil.rmtree(folder, ignore_errors=True)


def write_config(folder: Path, users: dict, cert: str = "server", header: str = "max-age=60", text: str = "") -> None:
    hashed = {user: bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode() for user, password in users.items()}
    text = text or (f"tls_server_config:\n  cert_file: {cert}.crt\n  key_file: {cert}.key\n"
                    "basic_auth_users:\n" + "".join(f"  {user}: '{value}'\n" for user, value in hashed.items())
                    + f"http_server_config:\n  headers:\n    Strict-Transport-Security: {header}\n")
    temporary = folder / "web.yml.new"
    temporary.write_text(text)
    temporary.replace(folder / "web.yml")  # one atomic change, as a Secret volume's symlink swap is


def get(exporter, folder: Path, auth=("prom", "first"), path: str = "/gpu/metrics") -> requests.Response:
    return requests.get(exporter.url(path), auth=auth, verify=str(folder / "ca.crt"), timeout=10)


def served_certificate_subject(exporter, folder: Path) -> str:
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    host, port = exporter.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return dict(item[0] for item in tls.getpeercert()["subject"])["commonName"]


@needs_openssl
def test_stalled_tls_handshakes_never_lock_out_and_are_cut_at_their_deadline(secured):
    exporter, folder = secured
    stalled = [connect(exporter) for _ in range(MAX_CONNECTIONS)]
    try:
        for conn in stalled[:8]:
            conn.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello that never finishes
        wait_until(lambda: all_read(port_of(exporter), stalled[:8]),
                   describe="every connection accepted, the stalled handshakes' bytes read")
        assert get(exporter, folder, path="/healthz").status_code == 200
        assert closed_by_peer(stalled[0], TLS_HANDSHAKE_TIMEOUT_SECONDS - 2), "the longest-idle handshake made room"
        started = time.monotonic()
        assert closed_by_peer(stalled[-1], TLS_HANDSHAKE_TIMEOUT_SECONDS + 5)
        assert time.monotonic() - started < TLS_HANDSHAKE_TIMEOUT_SECONDS + 2
    finally:
        for conn in stalled:
            conn.close()


@needs_openssl
def test_users_and_headers_are_re_read_for_the_next_request(secured):
    exporter, folder = secured
    assert get(exporter, folder).status_code == 200
    write_config(folder, users={"prom": "second"}, header="max-age=120")
    assert get(exporter, folder).status_code == 401
    fresh = get(exporter, folder, auth=("prom", "second"))
    assert fresh.status_code == 200 and fresh.headers["Strict-Transport-Security"] == "max-age=120"
    exporter.wait_for_log("msg=\"web config re-read\"")


@needs_openssl
def test_a_rotated_certificate_is_served_on_the_next_connection(secured):
    exporter, folder = secured
    assert served_certificate_subject(exporter, folder) == "server"
    _new_leaf(folder, "rotated", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth")
    write_config(folder, users={"prom": "first"}, cert="rotated")
    assert served_certificate_subject(exporter, folder) == "rotated"
    # cert-manager's way: the same file names, new contents.
    for suffix in ("crt", "key"):
        (folder / f"server.{suffix}").write_bytes((folder / f"rotated.{suffix}").read_bytes())
    _new_leaf(folder, "rotated", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth")
    assert served_certificate_subject(exporter, folder) == "rotated"


@needs_openssl
def test_a_broken_new_config_keeps_the_last_good_one_and_is_logged_once(secured):
    exporter, folder = secured
    write_config(folder, users={}, text="tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n")
    for _ in range(5):
        assert get(exporter, folder).status_code == 200  # the last good config: TLS and the old user
    warnings = exporter.wait_for_lines("new web config not loaded")
    assert len(warnings) == 1 and "nope.crt" in warnings[0]
    write_config(folder, users={"prom": "third"})
    assert get(exporter, folder, auth=("prom", "third")).status_code == 200
