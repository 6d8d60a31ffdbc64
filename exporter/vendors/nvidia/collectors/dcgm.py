"""dcgm-exporter's reader as a collector: --dcgm.* flags, the HTTP or textfile source the scraper fetches from, its state."""

from __future__ import annotations

import re
import threading
import time
from typing import Mapping, Optional
from urllib.parse import urlsplit

from exporter.base.errors import ConfigError, UpstreamError
from exporter.collectors.collector import Collector, Flag, Hub, Kind, SourceState
from exporter.collectors.roles import UPSTREAM
from exporter.vendors.nvidia.dcgm import DEFAULT_MAX_BODY_BYTES, redact_url
from exporter.vendors.nvidia.dcgm.file_source import SETTLE_SECONDS
from exporter.vendors.nvidia.dcgm.options import DcgmEndpoint, DcgmOptions

_OWN_DCGM = "the demo runs its own simulated dcgm-exporter; leave out `demo` to serve a real node"


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


def _checked_url(url: str) -> str:
    split_url(url)
    return url


def parse_dcgm_url(url: str) -> DcgmEndpoint:
    """--dcgm.url in the parts a fetch needs: ValueError when it is no http(s) URL, ConfigError when it
    names no host or a bad port."""
    from urllib.parse import unquote

    parts, shown = split_url(url), redact_url(url)
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--dcgm.url {shown!r} has an invalid port: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"--dcgm.url {shown!r} names no host")
    credentials = None if parts.username is None else (unquote(parts.username), unquote(parts.password or ""))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return DcgmEndpoint(parts.scheme, parts.hostname, port, path, shown, credentials)


class _Tracked:
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


class DcgmCollector(Collector):
    """dcgm-exporter's text, over HTTP or from its legacy textfile: always on; what the scraper rewrites."""

    name = "dcgm"
    offers = (UPSTREAM,)
    flags = (
        Flag("--dcgm.url", "dcgm_url", Kind("URL", _checked_url), "dcgm-exporter metrics URL to scrape on every request.",
             "http://127.0.0.1:9401/metrics"),
        Flag("--dcgm.file", "dcgm_file", "text", "Read this legacy dcgm textfile (e.g. /run/prometheus/dcgm.prom) instead of --dcgm.url."),
        Flag("--dcgm.timeout", "dcgm_timeout_seconds", "duration", "Total time allowed for one dcgm-exporter fetch.", 5.0),
        Flag("--dcgm.max-body-size", "dcgm_max_body_bytes", "size", "Largest dcgm answer accepted, once decoded (e.g. 8MiB, 512KiB); larger ones count as dcgm_up 0. Peak memory grows with it.",
             DEFAULT_MAX_BODY_BYTES),
    )
    refused = {
        "demo": {"dcgm_url": _OWN_DCGM, "dcgm_file": _OWN_DCGM},
        "mapping": dict.fromkeys(("dcgm_url", "dcgm_file", "dcgm_timeout_seconds", "dcgm_max_body_bytes"),
                                 "it reads the kubelet, never dcgm-exporter"),
    }

    def __init__(self) -> None:
        self._upstream: Optional[_Tracked] = None

    def check(self, command: str, values: Mapping[str, object], origins: Mapping[str, str]) -> None:
        timeout = values.get("dcgm_timeout_seconds", 5.0)
        if values.get("dcgm_file") and timeout < SETTLE_SECONDS:
            # A textfile changed in place is read once left alone that long: every scrape in the second
            # after each rewrite would run out of time and serve no GPU series.
            raise ConfigError(f"{origins.get('dcgm_timeout_seconds', '--dcgm.timeout')}: {timeout:g}s is shorter than "
                              f"the {SETTLE_SECONDS:g}s a textfile changed in place is left to settle before it is "
                              "read (--dcgm.file); allow at least that")

    def options(self, config) -> DcgmOptions:
        # The URL is read only where it is fetched from: `mapping` never does and `demo` serves its own, so
        # neither is refused over a serving container's environment; a textfile replaces it.
        fetched = config.command == "serve" and not config.dcgm_file
        return DcgmOptions(parse_dcgm_url(config.dcgm_url) if fetched else None, config.dcgm_file,
                           config.dcgm_timeout_seconds, config.dcgm_max_body_bytes)

    def prepare(self, hub: Hub) -> None:
        # Imported here so `--help` and `mapping` stay fast and independent of the HTTP stack.
        from exporter.vendors.nvidia.dcgm.file_source import FileSource
        from exporter.vendors.nvidia.dcgm.http_source import HttpSource
        from exporter.vendors.nvidia.dcgm.options import DcgmFileOptions, DcgmHttpOptions

        options = self.options(hub.config)
        source = (FileSource(DcgmFileOptions(options.file, options.timeout_seconds, options.max_body_bytes))
                  if options.file else
                  HttpSource(DcgmHttpOptions(options.endpoint, options.timeout_seconds, options.max_body_bytes)))
        self._upstream = hub.upstream = _Tracked(source)

    def state(self) -> SourceState:
        upstream = self._upstream
        if upstream is None or upstream.answered_at is None:
            return SourceState(self.name, False, (upstream.failure if upstream else None) or "not fetched yet")
        age = time.monotonic() - upstream.answered_at
        return SourceState(self.name, upstream.failure is None, upstream.failure, age)

    def announce(self) -> Mapping[str, object]:
        return {"dcgm": self._upstream.describe()} if self._upstream else {}
