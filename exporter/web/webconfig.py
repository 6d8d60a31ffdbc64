"""The --web.config.file (Prometheus exporter-toolkit format): TLS server settings and basic auth.

Format: https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md.
The file is read and checked once, at start-up; restart the exporter to pick up new certificates.
Relative paths in it are resolved against the file's own folder, as exporter-toolkit does.

Server contract (exporter/web/server.py):
- TLS on (``tls_enabled``): every connection is TLS, ``/healthz`` included; plain HTTP is refused.
- Basic auth on (``auth_required``): every path needs credentials except UNAUTHENTICATED_PATHS
  (``/healthz``), so kubelet probes, which cannot send credentials, still work. It answers only
  "ok" and says nothing about GPUs or pods.
- A failed check gets a 401 with ``WWW-Authenticate: <WWW_AUTHENTICATE>`` and no body detail.
- ``extra_headers`` go on every response, the 401s included.

Options we cannot honour with Python's ssl module are refused with a clear error, never ignored:
inline ``cert``/``key``, ``client_allowed_sans``, ``curve_preferences``, ``rate_limit``, and the
client_auth_types that accept unverified certificates.
"""
from __future__ import annotations

import os
import ssl
import types
import warnings
from collections.abc import Hashable
from typing import Any, Mapping

import yaml

from exporter.base.errors import ConfigError
from exporter.web.basicauth import WWW_AUTHENTICATE, BasicAuth, is_bcrypt_hash
from exporter.web.routes import HEALTH_PATH

__all__ = ["UNAUTHENTICATED_PATHS", "WWW_AUTHENTICATE", "WebConfig", "load_web_config"]

UNAUTHENTICATED_PATHS = frozenset({HEALTH_PATH})

_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
# Go's tls.CipherSuites() names for TLS <= 1.2, mapped to OpenSSL's names.
_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA", "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
# The headers exporter-toolkit lets a config set, with the allowed values where it restricts them.
_HEADERS = {"Strict-Transport-Security": (), "X-Content-Type-Options": ("nosniff",),
            "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": (),
            "Content-Security-Policy": ()}
_UNSUPPORTED = {
    "rate_limit": "not supported by this exporter; rate-limit in Prometheus or a reverse proxy",
    "cert": "inline certificates are not supported; put the PEM in a file and use cert_file",
    "key": "inline keys are not supported; put the PEM in a file and use key_file",
    "client_allowed_sans": "not supported (Python's ssl cannot check SANs in the handshake); "
                           "give scrapers certificates from a dedicated client CA instead",
    "curve_preferences": "not supported; OpenSSL's default curves are used",
}
_SECTIONS = {
    "": {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"},
    "tls_server_config": {"cert_file", "key_file", "client_auth_type", "client_ca_file",
                          "client_ca", "min_version", "max_version", "cipher_suites",
                          "prefer_server_cipher_suites", "cert", "key", "client_allowed_sans",
                          "curve_preferences"},
    "http_server_config": {"headers", "http2"},
}


class WebConfig:
    """A checked web config; ``WebConfig()`` is the no-file default: plain HTTP, no auth."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None,
                 users: Mapping[str, bytes] | None = None,
                 extra_headers: Mapping[str, str] | None = None):
        self._ssl_context = ssl_context
        self._auth = BasicAuth(users) if users else None
        self.extra_headers = types.MappingProxyType(dict(extra_headers or {}))

    @property
    def tls_enabled(self) -> bool:
        return self._ssl_context is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server-side context (cert chain, versions, client-cert policy), or None without TLS."""
        return self._ssl_context

    @property
    def auth_required(self) -> bool:
        return self._auth is not None

    def path_requires_auth(self, path: str) -> bool:
        """Whether a request for ``path`` (no query string) must pass check_basic_auth."""
        return self._auth is not None and path not in UNAUTHENTICATED_PATHS

    def check_basic_auth(self, authorization_header: str | None) -> bool:
        """True when no auth is configured or the header carries a configured user's password."""
        return self._auth is None or self._auth.check(authorization_header)


def load_web_config(path: str) -> WebConfig:
    """Read and check the file; raises ConfigError with one line naming the file and the key."""
    doc = _read_yaml(path)
    _check_keys(path, "", doc)
    base_dir = os.path.dirname(os.path.abspath(path))
    tls = _section(path, doc, "tls_server_config")
    http = _section(path, doc, "http_server_config")
    return WebConfig(ssl_context=_build_ssl_context(path, base_dir, tls) if _tls_wanted(tls) else None,
                     users=_users(path, doc.get("basic_auth_users")),
                     extra_headers=_headers(path, http))


def _fail(path: str, key: str, problem: Any) -> ConfigError:
    one_line = " ".join(str(problem).split())
    return ConfigError(f"web config {path}: {key}: {one_line}" if key else f"web config {path}: {one_line}")


class _StrictLoader(yaml.SafeLoader):
    """safe_load, but a key given twice is an error (Go's yaml.UnmarshalStrict agrees)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep)


def _read_yaml(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except OSError as exc:
        raise _fail(path, "", f"cannot read the file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise _fail(path, "", "not UTF-8 text") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _fail(path, "", f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc
    if doc is None:
        return {}  # an empty file configures nothing, as with exporter-toolkit
    if not isinstance(doc, dict):
        raise _fail(path, "", "the top level must be a mapping of settings")
    return doc


def _check_keys(path: str, section: str, mapping: dict) -> None:
    for key in mapping:
        name = f"{section}.{key}" if section else str(key)
        if key not in _SECTIONS[section]:
            raise _fail(path, name, f"unknown key (allowed: {', '.join(sorted(_SECTIONS[section]))})")
        if key in _UNSUPPORTED:
            raise _fail(path, name, _UNSUPPORTED[key])


def _section(path: str, doc: dict, name: str) -> dict:
    value = doc.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, name, "must be a mapping")
    _check_keys(path, name, value)
    return value


def _string(path: str, key: str, value: Any, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise _fail(path, key, f"must be a string, got {type(value).__name__}")
    return value


def _tls_wanted(tls: dict) -> bool:
    # Any TLS setting turns TLS on (then cert_file and key_file are required). exporter-toolkit
    # would serve plain HTTP for, say, only min_version; an operator who wrote it expects TLS.
    return any(value is not None for value in tls.values())


def _build_ssl_context(path: str, base_dir: str, tls: dict) -> ssl.SSLContext:
    key = "tls_server_config."
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(path, ctx, tls)
    cert_file = _file(path, base_dir, key + "cert_file", tls.get("cert_file"), "CERTIFICATE-----")
    key_file = _file(path, base_dir, key + "key_file", tls.get("key_file"), "PRIVATE KEY-----")
    try:
        ctx.load_cert_chain(cert_file, key_file, password=_no_password(path, key + "key_file"))
    except ssl.SSLError as exc:
        problem = ("the key does not belong to cert_file's certificate" if "MISMATCH" in str(exc)
                   else f"cannot load {cert_file} with {key_file}: {exc}")
        raise _fail(path, key + "key_file", problem) from exc
    prefer_server = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer_server, bool):
        raise _fail(path, key + "prefer_server_cipher_suites", "must be true or false")
    if not prefer_server:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.get("cipher_suites") is not None:
        _set_ciphers(path, ctx, tls["cipher_suites"])
    _set_client_auth(path, base_dir, ctx, tls)
    return ctx


def _set_versions(path: str, ctx: ssl.SSLContext, tls: dict) -> None:
    versions = {}
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        text = _string(path, "tls_server_config." + name, tls.get(name), default)
        if text not in _TLS_VERSIONS:
            raise _fail(path, "tls_server_config." + name,
                        f"unknown TLS version {text!r} (one of {', '.join(_TLS_VERSIONS)})")
        versions[name] = _TLS_VERSIONS[text]
    if versions["min_version"] > versions["max_version"]:
        raise _fail(path, "tls_server_config.min_version", "is above max_version")
    with warnings.catch_warnings():
        # Python deprecates TLS 1.0/1.1; the format still allows them and the operator asked.
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = versions["min_version"]
        ctx.maximum_version = versions["max_version"]


def _file(path: str, base_dir: str, key: str, value: Any, pem_marker: str) -> str:
    name = _string(path, key, value)
    if not name:
        raise _fail(path, key, "is required when TLS is configured")
    full = os.path.join(base_dir, name)  # absolute names stay as they are
    try:
        with open(full, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise _fail(path, key, f"cannot read {full}: {exc.strerror}") from exc
    if pem_marker.encode() not in text:
        raise _fail(path, key, f"{full} holds no PEM '{pem_marker.rstrip('-')}'")
    return full


def _no_password(path: str, key: str):
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's passphrase.
    def refuse() -> bytes:
        raise _fail(path, key, "the key is encrypted; give an unencrypted key file")
    return refuse


def _set_ciphers(path: str, ctx: ssl.SSLContext, names: Any) -> None:
    key = "tls_server_config.cipher_suites"
    if not isinstance(names, list) or not names:
        raise _fail(path, key, "must be a non-empty list of Go cipher suite names")
    for name in names:
        if name in _TLS13_SUITES:
            raise _fail(path, key, f"{name} is a TLS 1.3 suite; those are not configurable "
                                   "(nor in Go): list only TLS 1.2 suites")
        if not isinstance(name, str) or name not in _CIPHERS:
            raise _fail(path, key, f"unknown cipher suite {name!r} (Go names, e.g. "
                                   "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    try:
        ctx.set_ciphers(":".join(_CIPHERS[n] for n in names))
    except ssl.SSLError as exc:
        raise _fail(path, key, f"none of these suites is available in this OpenSSL: {exc}") from exc


def _set_client_auth(path: str, base_dir: str, ctx: ssl.SSLContext, tls: dict) -> None:
    key = "tls_server_config.client_auth_type"
    policy = _string(path, key, tls.get("client_auth_type"), "NoClientCert")
    if policy not in _CLIENT_AUTH:
        unverified = policy in ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
        raise _fail(path, key, f"{policy!r} is not supported: " + (
            "it accepts client certificates nobody verifies; use RequireAndVerifyClientCert"
            if unverified else f"use one of {', '.join(_CLIENT_AUTH)}"))
    ca_file, ca_text = tls.get("client_ca_file"), tls.get("client_ca")
    if ca_file and ca_text:
        raise _fail(path, "tls_server_config.client_ca", "give client_ca or client_ca_file, not both")
    if policy == "NoClientCert":
        if ca_file or ca_text:
            raise _fail(path, key, "a client CA is configured but client_auth_type is NoClientCert; "
                                   "set RequireAndVerifyClientCert")
        return
    if not (ca_file or ca_text):
        raise _fail(path, "tls_server_config.client_ca_file", f"is required with {policy}")
    ca_key = "tls_server_config.client_ca_file" if ca_file else "tls_server_config.client_ca"
    try:
        if ca_file:
            ctx.load_verify_locations(cafile=_file(path, base_dir, ca_key, ca_file, "CERTIFICATE-----"))
        else:
            ctx.load_verify_locations(cadata=_string(path, ca_key, ca_text))
    except ssl.SSLError as exc:
        raise _fail(path, ca_key, f"no usable CA certificate: {exc}") from exc
    ctx.verify_mode = _CLIENT_AUTH[policy]


def _users(path: str, users: Any) -> dict[str, bytes]:
    if users is None:
        return {}
    if not isinstance(users, dict):
        raise _fail(path, "basic_auth_users", "must be a mapping of user name to bcrypt hash")
    checked = {}
    for user, hashed in users.items():
        key = f"basic_auth_users.{user}"
        if not isinstance(user, str) or not user or ":" in user:
            raise _fail(path, key, "user names must be non-empty strings without ':' (quote it)")
        if not is_bcrypt_hash(hashed):
            raise _fail(path, key, "not a bcrypt hash; make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'")
        checked[user] = hashed.encode("ascii")
    return checked


def _headers(path: str, http: dict) -> dict[str, str]:
    if http.get("http2") not in (None, True, False):
        raise _fail(path, "http_server_config.http2", "must be true or false")
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        raise _fail(path, "http_server_config.headers", "must be a mapping of header to value")
    for name, value in headers.items():
        key = f"http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise _fail(path, key, f"cannot be configured (allowed: {', '.join(_HEADERS)})")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise _fail(path, key, "must be a single-line string")
        if _HEADERS[name] and value not in _HEADERS[name]:
            raise _fail(path, key, f"must be one of {', '.join(_HEADERS[name])}, got {value!r}")
    return {name: value for name, value in headers.items() if value}  # blank means unset
