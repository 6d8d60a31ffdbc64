"""A vendor exporter's URL read and checked, and the source a scrape fetches from, remembering when it answered and why it failed."""

from __future__ import annotations

import re
import threading
import time
from typing import Optional
from urllib.parse import unquote, urlsplit

from exporter.base.errors import ConfigError, UpstreamError
from exporter.sources.upstream import Endpoint, redact_url


def split_url(url: str):
    """The form every command checks: an http(s) URL that splits; ValueError (the parser names the flag
    or variable) otherwise."""
    shown = redact_url(url)
    if not re.match(r"https?://[^/\s]+", url):
        raise ValueError(f"expected an http:// or https:// URL, got {shown!r}")
    try:
        return urlsplit(url)
    except ValueError as exc:  # e.g. an IPv6 host without its closing bracket
        raise ValueError(f"invalid URL {shown!r}: {exc}") from None


def checked_url(url: str) -> str:
    """A flag's URL as given, once split_url takes it (the parse function of a URL flag)."""
    split_url(url)
    return url


def parse_url(url: str, flag: str) -> Endpoint:
    """A URL flag's value in the parts a fetch needs: ValueError when it is no http(s) URL, ConfigError (naming
    `flag`) when it names no host or a bad port."""
    parts, shown = split_url(url), redact_url(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{flag} {shown!r} has an invalid port: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"{flag} {shown!r} names no host")
    credentials = None if parts.username is None else (unquote(parts.username), unquote(parts.password or ""))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Endpoint(parts.scheme, parts.hostname, port, path, shown, credentials)


class Tracked:
    """The source the scraper fetches from, remembering when it last answered and why it last failed."""

    def __init__(self, source):
        self._source = source
        self._lock = threading.Lock()
        self.answered_at: Optional[float] = None  # time.monotonic() of the last answer
        self.failure: Optional[str] = None  # the last failure's message, while it fails

    def describe(self) -> str:
        return self._source.describe()

    def fetch(self) -> bytes:
        try:
            body = self._source.fetch()
        except UpstreamError as exc:
            with self._lock:
                self.failure = " ".join(str(exc).split())
            raise
        with self._lock:
            self.answered_at, self.failure = time.monotonic(), None
        return body
