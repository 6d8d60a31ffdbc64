"""Tests of exporter.web.webconfig: every validation error, and real TLS/mTLS handshakes and basic auth."""
from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest
import requests

from exporter.base.errors import ConfigError
from exporter.web.webconfig import UNAUTHENTICATED_PATHS, WebConfig, load_web_config
from support.tlspki import OPENSSL, SKIP_REASON, make_pki

pytestmark = pytest.mark.skipif(OPENSSL is None, reason=SKIP_REASON)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _write(folder: Path, text: str) -> str:
    path = folder / "web-config.yml"
    path.write_text(text)
    return str(path)


def _tls_yaml(pki: Path, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/server.key\n{extra}"


# --- validation ------------------------------------------------------------------------------

BAD_CONFIGS = [
    # (id, config text ({pki} is replaced), key the message must name, words it must contain)
    ("bad-yaml", "tls_server_config: [\n", "", "invalid YAML"),
    ("not-a-mapping", "- a\n- b\n", "", "top level"),
    ("unknown-top-key", "tls_config: {}\n", "tls_config", "unknown key"),
    ("duplicate-key", "basic_auth_users: {}\nbasic_auth_users: {}\n", "", "duplicate key"),
    ("unknown-tls-key", "tls_server_config:\n  certfile: a\n", "tls_server_config.certfile", "unknown key"),
    ("section-not-mapping", "tls_server_config: yes\n", "tls_server_config", "mapping"),
    ("cert-missing", "tls_server_config:\n  key_file: {pki}/server.key\n",
     "tls_server_config.cert_file", "required"),
    ("key-missing", "tls_server_config:\n  cert_file: {pki}/server.crt\n",
     "tls_server_config.key_file", "required"),
    ("only-min-version", "tls_server_config:\n  min_version: TLS13\n", "tls_server_config.cert_file", "required"),
    ("cert-unreadable", "tls_server_config:\n  cert_file: {pki}/nope.crt\n  key_file: {pki}/server.key\n",
     "tls_server_config.cert_file", "cannot read"),
    ("cert-not-pem", "tls_server_config:\n  cert_file: {pki}/server.csr\n  key_file: {pki}/server.key\n",
     "tls_server_config.cert_file", "no PEM"),
    ("key-is-a-cert", "tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/server.crt\n",
     "tls_server_config.key_file", "no PEM"),
    ("key-mismatch", "tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/client.key\n",
     "tls_server_config.key_file", "does not belong"),
    ("key-encrypted", "tls_server_config:\n  cert_file: {pki}/server.crt\n  key_file: {pki}/encrypted.key\n",
     "tls_server_config.key_file", "encrypted"),
    ("bad-min-version", "TLS_EXTRA  min_version: TLS14\n", "tls_server_config.min_version", "unknown TLS version"),
    ("bad-max-version", "TLS_EXTRA  max_version: 1.3\n", "tls_server_config.max_version", "must be a string"),
    ("min-above-max", "TLS_EXTRA  min_version: TLS13\n  max_version: TLS12\n",
     "tls_server_config.min_version", "above max_version"),
    ("client-ca-missing", "TLS_EXTRA  client_auth_type: RequireAndVerifyClientCert\n",
     "tls_server_config.client_ca_file", "required"),
    ("client-ca-missing-if-given", "TLS_EXTRA  client_auth_type: VerifyClientCertIfGiven\n",
     "tls_server_config.client_ca_file", "required"),
    ("client-ca-unreadable", "TLS_EXTRA  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: {pki}/nope.crt\n", "tls_server_config.client_ca_file", "cannot read"),
    ("client-ca-not-a-cert", "TLS_EXTRA  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: {pki}/ca.key\n", "tls_server_config.client_ca_file", "no PEM"),
    ("client-ca-without-policy", "TLS_EXTRA  client_ca_file: {pki}/ca.crt\n",
     "tls_server_config.client_auth_type", "NoClientCert"),
    ("client-auth-unverified", "TLS_EXTRA  client_auth_type: RequireAnyClientCert\n"
     "  client_ca_file: {pki}/ca.crt\n", "tls_server_config.client_auth_type", "nobody verifies"),
    ("client-auth-request", "TLS_EXTRA  client_auth_type: RequestClientCert\n",
     "tls_server_config.client_auth_type", "not supported"),
    ("client-auth-unknown", "TLS_EXTRA  client_auth_type: Always\n",
     "tls_server_config.client_auth_type", "not supported"),
    ("cipher-unknown", "TLS_EXTRA  cipher_suites: [TLS_FOO]\n", "tls_server_config.cipher_suites", "unknown"),
    ("cipher-tls13", "TLS_EXTRA  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
     "tls_server_config.cipher_suites", "TLS 1.3"),
    ("cipher-not-list", "TLS_EXTRA  cipher_suites: TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n",
     "tls_server_config.cipher_suites", "list"),
    ("prefer-not-bool", "TLS_EXTRA  prefer_server_cipher_suites: maybe\n",
     "tls_server_config.prefer_server_cipher_suites", "true or false"),
    ("inline-cert", "tls_server_config:\n  cert: abc\n", "tls_server_config.cert", "cert_file"),
    ("inline-key", "tls_server_config:\n  key: abc\n", "tls_server_config.key", "key_file"),
    ("allowed-sans", "TLS_EXTRA  client_allowed_sans: [a]\n", "tls_server_config.client_allowed_sans",
     "not supported"),
    ("curves", "TLS_EXTRA  curve_preferences: [X25519]\n", "tls_server_config.curve_preferences",
     "not supported"),
    ("rate-limit", "rate_limit:\n  interval: 1s\n  burst: 2\n", "rate_limit", "not supported"),
    ("plain-password", "basic_auth_users:\n  alice: hunter2\n", "basic_auth_users.alice", "not a bcrypt hash"),
    ("md5-hash", "basic_auth_users:\n  alice: $apr1$abc$0123456789012345678901\n",
     "basic_auth_users.alice", "not a bcrypt hash"),
    ("user-with-colon", "basic_auth_users:\n  'a:b': HASH\n", "basic_auth_users.a:b", "':'"),
    ("user-not-string", "basic_auth_users:\n  123: HASH\n", "basic_auth_users.123", "strings"),
    ("users-not-mapping", "basic_auth_users: [alice]\n", "basic_auth_users", "mapping"),
    ("header-unknown", "http_server_config:\n  headers:\n    Server: x\n",
     "http_server_config.headers.Server", "cannot be configured"),
    ("header-bad-value", "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     "http_server_config.headers.X-Frame-Options", "deny"),
    ("header-newline", "http_server_config:\n  headers:\n    Content-Security-Policy: \"a\\r\\nSet-Cookie: x\"\n",
     "http_server_config.headers.Content-Security-Policy", "single-line"),
    ("http2-not-bool", "http_server_config:\n  http2: sometimes\n", "http_server_config.http2", "true or false"),
]


@pytest.mark.parametrize("text,key,words", [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_invalid_config_is_one_clear_line_naming_file_and_key(tmp_path, pki, text, key, words):
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    text = text.replace("TLS_EXTRA", _tls_yaml(pki)).replace("{pki}", str(pki)).replace("HASH", hashed)
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_web_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"web config {path}: ")
    assert f": {key}: " in message if key else True
    assert words in message


def test_missing_file_names_the_file(tmp_path):
    path = str(tmp_path / "absent.yml")
    with pytest.raises(ConfigError, match="absent.yml: cannot read the file: No such file"):
        load_web_config(path)


def test_empty_file_means_plain_http_without_auth(tmp_path):
    config = load_web_config(_write(tmp_path, ""))
    assert not config.tls_enabled and config.ssl_context() is None
    assert not config.auth_required and config.check_basic_auth(None)
    assert not config.path_requires_auth("/gpu/metrics")


def test_relative_paths_are_resolved_against_the_config_folder(tmp_path, pki, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    for name in ("server.crt", "server.key", "ca.crt"):
        shutil.copy(pki / name, folder / name)
    monkeypatch.chdir(tmp_path)  # not the config's folder: names must not resolve against the cwd
    text = ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n")
    config = load_web_config(_write(folder, text))
    assert config.ssl_context().verify_mode == ssl.CERT_REQUIRED


def test_headers_are_validated_and_exposed(tmp_path):
    config = load_web_config(_write(tmp_path, "http_server_config:\n  http2: false\n  headers:\n"
                                              "    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n"
                                              "    Strict-Transport-Security: ''\n"))
    assert dict(config.extra_headers) == {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"}


# --- TLS, served for real --------------------------------------------------------------------

class _OkHandler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class _TLSServer(ThreadingHTTPServer):
    """Handshakes in the worker thread with a timeout, as the exporter's server should."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext):
        super().__init__(("127.0.0.1", 0), _OkHandler)
        self.context = context

    def finish_request(self, request, client_address):
        request.settimeout(5)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except OSError:  # ssl.SSLError included: plain HTTP, wrong version, missing client cert
            return
        with tls:
            super().finish_request(tls, client_address)

    def handle_error(self, request, client_address):
        pass  # a client dropping the connection mid-request is expected in these tests


@contextlib.contextmanager
def _serving(config: WebConfig):
    server = _TLSServer(config.ssl_context())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _load(tmp_path: Path, pki: Path, extra: str = "") -> WebConfig:
    return load_web_config(_write(tmp_path, _tls_yaml(pki, extra)))


def _handshake(port: int, pki: Path, max_version=ssl.TLSVersion.MAXIMUM_SUPPORTED) -> str:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.maximum_version = max_version
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.version()


def test_https_handshake_verifies_against_the_ca(tmp_path, pki):
    config = _load(tmp_path, pki)
    assert config.tls_enabled
    with _serving(config) as port:
        response = requests.get(f"https://127.0.0.1:{port}/", verify=str(pki / "ca.crt"), timeout=5)
        assert (response.status_code, response.text) == (200, "ok")
        assert _handshake(port, pki, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"  # default minimum TLS12


def test_plain_http_to_the_tls_port_fails(tmp_path, pki):
    with _serving(_load(tmp_path, pki)) as port:
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"http://127.0.0.1:{port}/", timeout=5)


def test_min_version_tls13_refuses_a_tls12_client(tmp_path, pki):
    with _serving(_load(tmp_path, pki, "  min_version: TLS13\n")) as port:
        with pytest.raises(ssl.SSLError):
            _handshake(port, pki, ssl.TLSVersion.TLSv1_2)
        assert _handshake(port, pki) == "TLSv1.3"


def test_max_version_and_cipher_suites_are_applied(tmp_path, pki):
    config = _load(tmp_path, pki, "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n")
    with _serving(config) as port:
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() == "TLSv1.2"
                assert tls.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"


def test_mtls_requires_a_client_cert_from_the_client_ca(tmp_path, pki):
    config = _load(tmp_path, pki, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki}/ca.crt\n")
    url_args = {"verify": str(pki / "ca.crt"), "timeout": 5}
    with _serving(config) as port:
        url = f"https://127.0.0.1:{port}/"
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url, **url_args)
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url, cert=(str(pki / "rogue.crt"), str(pki / "rogue.key")), **url_args)
        response = requests.get(url, cert=(str(pki / "client.crt"), str(pki / "client.key")), **url_args)
        assert response.status_code == 200


def test_verify_client_cert_if_given_lets_anonymous_in_but_not_rogues(tmp_path, pki):
    ca_text = (pki / "ca.crt").read_text().replace("\n", "\n    ")
    config = _load(tmp_path, pki, f"  client_auth_type: VerifyClientCertIfGiven\n  client_ca: |\n    {ca_text}\n")
    with _serving(config) as port:
        url = f"https://127.0.0.1:{port}/"
        assert requests.get(url, verify=str(pki / "ca.crt"), timeout=5).status_code == 200
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(url, verify=str(pki / "ca.crt"), timeout=5,
                         cert=(str(pki / "rogue.crt"), str(pki / "rogue.key")))


# --- basic auth ------------------------------------------------------------------------------

def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def auth_config(tmp_path) -> WebConfig:
    alice = bcrypt.hashpw(b"wonder:land", bcrypt.gensalt(rounds=4)).decode()
    # htpasswd writes the $2y$ prefix; it must be accepted like $2b$.
    bob = bcrypt.hashpw("pässword".encode(), bcrypt.gensalt(rounds=5)).decode().replace("$2b$", "$2y$", 1)
    return load_web_config(_write(tmp_path, f"basic_auth_users:\n  alice: '{alice}'\n  bob: '{bob}'\n"))


def test_basic_auth_none_wrong_right(auth_config):
    assert auth_config.auth_required and not auth_config.tls_enabled
    assert auth_config.check_basic_auth(None) is False
    assert auth_config.check_basic_auth(_basic("alice", "wonder")) is False
    assert auth_config.check_basic_auth(_basic("mallory", "wonder:land")) is False
    assert auth_config.check_basic_auth(_basic("alice", "wonder:land")) is True
    assert auth_config.check_basic_auth(_basic("bob", "pässword")) is True


def test_cached_success_does_not_let_other_passwords_or_users_in(auth_config):
    assert auth_config.check_basic_auth(_basic("alice", "wonder:land")) is True
    assert auth_config.check_basic_auth(_basic("alice", "wonder:land")) is True  # served from the cache
    assert auth_config.check_basic_auth(_basic("alice", "wonder:lan")) is False
    assert auth_config.check_basic_auth(_basic("bob", "wonder:land")) is False
    assert auth_config.check_basic_auth(_basic("alice", "wonder:land")) is True


@pytest.mark.parametrize("header", [
    "", "Bearer abc", "Basic", "Basic !!!notbase64", "Basic " + base64.b64encode(b"alice").decode(),
    "Basic " + base64.b64encode(b"\xff\xfe:wonder:land").decode(), "Basic ünicode",
])
def test_malformed_authorization_headers_are_refused(auth_config, header):
    assert auth_config.check_basic_auth(header) is False


def test_scheme_is_case_insensitive_and_long_passwords_do_not_crash(auth_config):
    assert auth_config.check_basic_auth(_basic("alice", "wonder:land").replace("Basic", "basic")) is True
    assert auth_config.check_basic_auth(_basic("alice", "x" * 200)) is False
    assert auth_config.check_basic_auth(_basic("nobody", "x" * 200)) is False


def test_healthz_is_the_only_path_without_auth(auth_config):
    assert UNAUTHENTICATED_PATHS == {"/healthz"}
    assert not auth_config.path_requires_auth("/healthz")
    for path in ("/gpu/metrics", "/metrics", "/", "/healthz/", "/HEALTHZ"):
        assert auth_config.path_requires_auth(path)
