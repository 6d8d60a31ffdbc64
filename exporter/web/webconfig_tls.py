"""The --web.config.file's tls_server_config as a server-side ssl.SSLContext: versions, ciphers, client auth."""

from __future__ import annotations

import os
import ssl
import warnings
from typing import Any

from exporter.web.webconfig_file import config_error

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


def tls_wanted(tls: dict) -> bool:
    """Whether tls_server_config turns TLS on."""
    # Any TLS setting turns TLS on (then cert_file and key_file are required). exporter-toolkit
    # would serve plain HTTP for, say, only min_version; an operator who wrote it expects TLS.
    return any(value is not None for value in tls.values())


def build_ssl_context(path: str, base_dir: str, tls: dict) -> ssl.SSLContext:
    """The server-side context for tls_server_config; its files are resolved against base_dir."""
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
        raise config_error(path, key + "key_file", problem) from exc
    prefer_server = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer_server, bool):
        raise config_error(path, key + "prefer_server_cipher_suites", "must be true or false")
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
            raise config_error(path, "tls_server_config." + name,
                               f"unknown TLS version {text!r} (one of {', '.join(_TLS_VERSIONS)})")
        versions[name] = _TLS_VERSIONS[text]
    if versions["min_version"] > versions["max_version"]:
        raise config_error(path, "tls_server_config.min_version", "is above max_version")
    with warnings.catch_warnings():
        # Python deprecates TLS 1.0/1.1; the format still allows them and the operator asked.
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = versions["min_version"]
        ctx.maximum_version = versions["max_version"]


def _file(path: str, base_dir: str, key: str, value: Any, pem_marker: str) -> str:
    name = _string(path, key, value)
    if not name:
        raise config_error(path, key, "is required when TLS is configured")
    full = os.path.join(base_dir, name)  # absolute names stay as they are
    try:
        with open(full, "rb") as f:
            text = f.read()
    except OSError as exc:
        raise config_error(path, key, f"cannot read {full}: {exc.strerror}") from exc
    if pem_marker.encode() not in text:
        raise config_error(path, key, f"{full} holds no PEM '{pem_marker.rstrip('-')}'")
    return full


def _no_password(path: str, key: str):
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's passphrase.
    def refuse() -> bytes:
        raise config_error(path, key, "the key is encrypted; give an unencrypted key file")
    return refuse


def _set_ciphers(path: str, ctx: ssl.SSLContext, names: Any) -> None:
    key = "tls_server_config.cipher_suites"
    if not isinstance(names, list) or not names:
        raise config_error(path, key, "must be a non-empty list of Go cipher suite names")
    for name in names:
        if name in _TLS13_SUITES:
            raise config_error(path, key, f"{name} is a TLS 1.3 suite; those are not configurable "
                                          "(nor in Go): list only TLS 1.2 suites")
        if not isinstance(name, str) or name not in _CIPHERS:
            raise config_error(path, key, f"unknown cipher suite {name!r} (Go names, e.g. "
                                          "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    try:
        ctx.set_ciphers(":".join(_CIPHERS[n] for n in names))
    except ssl.SSLError as exc:
        raise config_error(path, key, f"none of these suites is available in this OpenSSL: {exc}") from exc


def _set_client_auth(path: str, base_dir: str, ctx: ssl.SSLContext, tls: dict) -> None:
    key = "tls_server_config.client_auth_type"
    policy = _string(path, key, tls.get("client_auth_type"), "NoClientCert")
    if policy not in _CLIENT_AUTH:
        unverified = policy in ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
        raise config_error(path, key, f"{policy!r} is not supported: " + (
            "it accepts client certificates nobody verifies; use RequireAndVerifyClientCert"
            if unverified else f"use one of {', '.join(_CLIENT_AUTH)}"))
    ca_file, ca_text = tls.get("client_ca_file"), tls.get("client_ca")
    if ca_file and ca_text:
        raise config_error(path, "tls_server_config.client_ca", "give client_ca or client_ca_file, not both")
    if policy == "NoClientCert":
        if ca_file or ca_text:
            raise config_error(path, key, "a client CA is configured but client_auth_type is NoClientCert; "
                                          "set RequireAndVerifyClientCert")
        return
    if not (ca_file or ca_text):
        raise config_error(path, "tls_server_config.client_ca_file", f"is required with {policy}")
    ca_key = "tls_server_config.client_ca_file" if ca_file else "tls_server_config.client_ca"
    try:
        if ca_file:
            ctx.load_verify_locations(cafile=_file(path, base_dir, ca_key, ca_file, "CERTIFICATE-----"))
        else:
            ctx.load_verify_locations(cadata=_string(path, ca_key, ca_text))
    except ssl.SSLError as exc:
        raise config_error(path, ca_key, f"no usable CA certificate: {exc}") from exc
    ctx.verify_mode = _CLIENT_AUTH[policy]


def _string(path: str, key: str, value: Any, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise config_error(path, key, f"must be a string, got {type(value).__name__}")
    return value
