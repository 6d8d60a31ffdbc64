"""The --web.config.file (Prometheus exporter-toolkit format): TLS server settings and basic auth.

Format: https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md.
The file is read and checked at start-up, then again whenever it or a file it names changes
(webconfig_reload). Its reading and key checks are in webconfig_file, its TLS settings in webconfig_tls.
Relative paths in it are resolved against the file's own folder, as exporter-toolkit does.

Server contract (exporter/web/server.py and handler.py):
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
from typing import Mapping

from exporter.web.basicauth import WWW_AUTHENTICATE, BasicAuth
from exporter.web.routes import HEALTH_PATH
from exporter.web.webconfig_file import check_keys, checked_headers, checked_users, read_document, read_section
from exporter.web.webconfig_tls import build_ssl_context, tls_wanted

__all__ = ["UNAUTHENTICATED_PATHS", "WWW_AUTHENTICATE", "WebConfig", "load_web_config"]

UNAUTHENTICATED_PATHS = frozenset({HEALTH_PATH})


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
    doc = read_document(path)
    check_keys(path, "", doc)
    base_dir = os.path.dirname(os.path.abspath(path))
    tls = read_section(path, doc, "tls_server_config")
    http = read_section(path, doc, "http_server_config")
    return WebConfig(ssl_context=build_ssl_context(path, base_dir, tls) if tls_wanted(tls) else None,
                     users=checked_users(path, doc.get("basic_auth_users")),
                     extra_headers=checked_headers(path, http))
