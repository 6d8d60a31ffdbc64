"""AMD's device-metrics-exporter read as a collector: --amd.metrics-url and --amd.timeout, the HTTP source the scraper fetches from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from exporter.collectors.collector import Flag, Hub, Kind
from exporter.collectors.roles import UPSTREAM
from exporter.collectors.vendor import UpstreamReader
from exporter.sources.upstream import DEFAULT_MAX_BODY_BYTES, Endpoint, FetchWords
from exporter.sources.upstream.tracked import Tracked, checked_url, parse_url

METRICS_URL_FLAG, TIMEOUT_FLAG = "--amd.metrics-url", "--amd.timeout"
AMD_FETCH_WORDS = FetchWords("device-metrics-exporter", METRICS_URL_FLAG, TIMEOUT_FLAG)


@dataclass(frozen=True)
class AmdReaderOptions:
    """Where AMD's exporter answers and how long one fetch may take."""

    endpoint: Optional[Endpoint]  # None where nothing is fetched (`mapping`)
    timeout_seconds: float


class AmdExporterCollector(UpstreamReader):
    """AMD's device-metrics-exporter's text over HTTP: always on with --gpu.vendor amd; what the scraper rewrites."""

    name = "amd_exporter"
    offers = (UPSTREAM,)
    flags = (
        Flag(METRICS_URL_FLAG, "amd_metrics_url", Kind("URL", checked_url), "On AMD nodes: AMD device-metrics-exporter's "
             "metrics URL to scrape on every request.", "http://127.0.0.1:5000/metrics"),
        Flag(TIMEOUT_FLAG, "amd_timeout_seconds", "duration", "On AMD nodes: total time allowed for one fetch of AMD's "
             "exporter, and for one List of its identity service.", 5.0),
    )
    refused = {
        "demo": {"amd_metrics_url": "the demo runs its own simulated AMD exporter; leave out `demo` to serve a real node"},
        "mapping": dict.fromkeys(("amd_metrics_url", "amd_timeout_seconds"),
                                 "it reads the kubelet, never AMD's metrics exporter"),
    }

    def options(self, config) -> AmdReaderOptions:
        # Read only where it is fetched from: `mapping` never does, so it refuses nothing of a serving
        # container's environment.
        fetched = config.command == "serve"
        return AmdReaderOptions(parse_url(config.amd_metrics_url, METRICS_URL_FLAG) if fetched else None,
                                config.amd_timeout_seconds)

    def prepare(self, hub: Hub) -> None:
        from exporter.sources.upstream.http_source import HttpSource  # `--help` and `mapping` load no HTTP stack

        options = self.options(hub.config)
        source = HttpSource(options.endpoint, options.timeout_seconds, DEFAULT_MAX_BODY_BYTES, AMD_FETCH_WORDS)
        self._upstream = hub.upstream = Tracked(source)
