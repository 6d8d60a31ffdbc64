"""dcgm-exporter's reader as a collector: --dcgm.* flags, the HTTP or textfile source the scraper fetches from, its state."""

from __future__ import annotations

from typing import Mapping

from exporter.base.errors import ConfigError
from exporter.collectors.collector import Flag, Hub, Kind
from exporter.collectors.roles import UPSTREAM
from exporter.collectors.vendor import UpstreamReader
from exporter.sources.upstream.tracked import Tracked, checked_url, parse_url
from exporter.vendors.nvidia.dcgm import DEFAULT_MAX_BODY_BYTES
from exporter.vendors.nvidia.dcgm.file_source import SETTLE_SECONDS
from exporter.vendors.nvidia.dcgm.options import DcgmEndpoint, DcgmOptions

_OWN_DCGM = "the demo runs its own simulated dcgm-exporter; leave out `demo` to serve a real node"


def parse_dcgm_url(url: str) -> DcgmEndpoint:
    """--dcgm.url in the parts a fetch needs: ValueError when it is no http(s) URL, ConfigError when it
    names no host or a bad port."""
    return parse_url(url, "--dcgm.url")


class DcgmCollector(UpstreamReader):
    """dcgm-exporter's text, over HTTP or from its legacy textfile: always on; what the scraper rewrites."""

    name = "dcgm"
    offers = (UPSTREAM,)
    flags = (
        Flag("--dcgm.url", "dcgm_url", Kind("URL", checked_url), "dcgm-exporter metrics URL to scrape on every request.",
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
        self._upstream = hub.upstream = Tracked(source)
