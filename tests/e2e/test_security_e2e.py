"""The real exporter process with --web.config.file: HTTPS only, basic auth on all but /healthz."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import bcrypt
import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.exporter_process import REPO_ROOT, exporter_command, exporter_env, start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes
from support.tlspki import OPENSSL, SKIP_REASON, make_pki

pytestmark = pytest.mark.skipif(OPENSSL is None, reason=SKIP_REASON)

FIXTURE = "dcgm/l4-aws-gpu-operator-default-counters.prom"
GPU_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"  # the L4 in FIXTURE
USER, PASSWORD = "prometheus", "s3cret:with-colon"


@pytest.fixture(scope="module")
def secured():
    """(https base URL, http base URL, CA file) of an exporter serving with TLS + basic auth."""
    # Under /tmp directly: unix socket paths are limited to ~107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="pgx-sec-", dir="/tmp"))
    try:
        yield from _serve_secured(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _serve_secured(folder: Path):
    pki = make_pki(folder)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    config = folder / "web-config.yml"
    # Relative names: the exporter must resolve them against the config file's folder.
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                      f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    with FakeKubelet(str(folder / "kubelet.sock")) as kubelet, \
            FakeDcgmExporter(fixture_bytes(FIXTURE)) as dcgm:
        kubelet.set_devices([AllocatedDevice("ml", "trainer-0", "main", "nvidia.com/gpu", GPU_UUID)])
        exporter = start_exporter(["--web.listen-address", "127.0.0.1:0", "--web.config.file", str(config),
                                   "--kubelet.socket", kubelet.socket_path, "--dcgm.url", dcgm.url])
        try:
            address = urlsplit(exporter.url("/")).netloc
            yield f"https://{address}", f"http://{address}", str(pki / "ca.crt")
        finally:
            exporter.stop()


def _get(secured, path: str, **kwargs) -> requests.Response:
    https_base, _, ca_file = secured
    return requests.get(https_base + path, verify=ca_file, timeout=10, **kwargs)


@pytest.mark.parametrize("path", ["/gpu/metrics", "/metrics", "/"])
def test_no_credentials_is_401_with_a_basic_challenge(secured, path):
    response = _get(secured, path)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    assert "DCGM_FI" not in response.text


@pytest.mark.parametrize("user,password", [(USER, "wrong"), ("intruder", PASSWORD), (USER, "")])
def test_wrong_credentials_are_401(secured, user, password):
    response = _get(secured, "/gpu/metrics", auth=(user, password))
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic")


def test_right_credentials_get_the_metrics_over_https(secured):
    for _ in range(3):  # repeated scrapes go through the verification cache
        response = _get(secured, "/gpu/metrics", auth=(USER, PASSWORD))
        assert response.status_code == 200
        assert "DCGM_FI_DEV_GPU_UTIL" in response.text
        assert "pod_gpu_exporter_dcgm_up 1" in response.text


def test_right_credentials_get_the_node_page(secured):
    response = _get(secured, "/", auth=(USER, PASSWORD))
    assert response.status_code == 200 and response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert "ml/<b>trainer-0</b>/main" in response.text and GPU_UUID in response.text


def test_a_refused_head_request_sends_no_body_and_the_connection_stays_usable(secured):
    # A 401 to HEAD with a body would desynchronise keep-alive: the next answer would be misread.
    https_base, _, ca_file = secured
    with requests.Session() as session:
        refused = session.head(https_base + "/gpu/metrics", verify=ca_file, timeout=10)
        assert refused.status_code == 401 and refused.content == b""
        after = session.get(https_base + "/healthz", verify=ca_file, timeout=10)
        assert after.status_code == 200 and after.text == "ok\n"


def test_healthz_needs_no_credentials_but_still_tls(secured):
    response = _get(secured, "/healthz")
    assert response.status_code == 200
    plain = requests.get(secured[1] + "/healthz", timeout=10)
    assert plain.status_code == 400 and plain.text != "ok\n"  # TLS only: plain HTTP gets no answer but 400


def test_plain_http_is_refused_with_400_as_exporter_toolkit_does(secured):
    _, http_base, _ = secured
    response = requests.get(http_base + "/gpu/metrics", auth=(USER, PASSWORD), timeout=10)
    assert response.status_code == 400
    assert response.text == "Client sent an HTTP request to an HTTPS server.\n"


def test_a_client_that_does_not_trust_the_ca_fails_the_handshake(secured):
    https_base, _, _ = secured
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(https_base + "/healthz", timeout=10)  # system CAs only


def test_a_bad_web_config_stops_start_up_with_one_line_and_exit_2(tmp_path):
    config = tmp_path / "web-config.yml"
    config.write_text("basic_auth_users:\n  prometheus: hunter2\n")  # a password, not a bcrypt hash
    result = subprocess.run(exporter_command() + ["--web.listen-address", "127.0.0.1:0", "--web.config.file",
                                                   str(config), "--kubelet.socket", str(tmp_path / "absent.sock")],
                            cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=60,
                            env=exporter_env())
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and "basic_auth_users.prometheus" in lines[0], result.stderr
