"""The --web.config.file's reading and checks: strict YAML, known keys, basic-auth users, extra headers."""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

from exporter.base.errors import ConfigError
from exporter.web.basicauth import is_bcrypt_hash

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


def config_error(path: str, key: str, problem: Any) -> ConfigError:
    """One line naming the file, the key (dotted, empty for the whole file) and what is wrong."""
    one_line = " ".join(str(problem).split())
    return ConfigError(f"web config {path}: {key}: {one_line}" if key else f"web config {path}: {one_line}")


@functools.lru_cache(maxsize=None)
def _strict_loader():
    """safe_load's loader, but a key given twice is an error (Go's yaml.UnmarshalStrict agrees). Made at the first
    web config read: PyYAML costs some 700 KiB of memory, which a node without a web config never needs."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
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

    return StrictLoader


def read_document(path: str) -> dict:
    """The file's top-level mapping ({} for an empty file), with no key given twice."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except OSError as exc:
        raise config_error(path, "", f"cannot read the file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise config_error(path, "", "not UTF-8 text") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise config_error(path, "", f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc
    if doc is None:
        return {}  # an empty file configures nothing, as with exporter-toolkit
    if not isinstance(doc, dict):
        raise config_error(path, "", "the top level must be a mapping of settings")
    return doc


def check_keys(path: str, section: str, mapping: dict) -> None:
    """Refuse keys the format does not know in `section` ("" for the top level), and those we cannot honour."""
    for key in mapping:
        name = f"{section}.{key}" if section else str(key)
        if key not in _SECTIONS[section]:
            raise config_error(path, name, f"unknown key (allowed: {', '.join(sorted(_SECTIONS[section]))})")
        if key in _UNSUPPORTED:
            raise config_error(path, name, _UNSUPPORTED[key])


def read_section(path: str, doc: dict, name: str) -> dict:
    """The top-level section `name` with its keys checked; {} when absent."""
    value = doc.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise config_error(path, name, "must be a mapping")
    check_keys(path, name, value)
    return value


def checked_users(path: str, users: Any) -> dict[str, bytes]:
    """basic_auth_users as user name to bcrypt hash."""
    if users is None:
        return {}
    if not isinstance(users, dict):
        raise config_error(path, "basic_auth_users", "must be a mapping of user name to bcrypt hash")
    checked = {}
    for user, hashed in users.items():
        key = f"basic_auth_users.{user}"
        if not isinstance(user, str) or not user or ":" in user:
            raise config_error(path, key, "user names must be non-empty strings without ':' (quote it)")
        if not is_bcrypt_hash(hashed):
            raise config_error(path, key, "not a bcrypt hash; make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'")
        checked[user] = hashed.encode("ascii")
    return checked


def checked_headers(path: str, http: dict) -> dict[str, str]:
    """http_server_config.headers that are set, each one exporter-toolkit allows with an allowed value."""
    if http.get("http2") not in (None, True, False):
        raise config_error(path, "http_server_config.http2", "must be true or false")
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        raise config_error(path, "http_server_config.headers", "must be a mapping of header to value")
    for name, value in headers.items():
        key = f"http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise config_error(path, key, f"cannot be configured (allowed: {', '.join(_HEADERS)})")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise config_error(path, key, "must be a single-line string")
        if _HEADERS[name] and value not in _HEADERS[name]:
            raise config_error(path, key, f"must be one of {', '.join(_HEADERS[name])}, got {value!r}")
    return {name: value for name, value in headers.items() if value}  # blank means unset
