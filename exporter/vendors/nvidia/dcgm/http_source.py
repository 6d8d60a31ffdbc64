"""Fetching dcgm-exporter's Prometheus text over HTTP: the generic fetch (sources.upstream) in dcgm-exporter's words."""

from __future__ import annotations

from exporter.sources.upstream import FetchWords
from exporter.sources.upstream.http_source import HttpSource as _HttpSource
from exporter.vendors.nvidia.dcgm.options import DcgmHttpOptions

DCGM_FETCH_WORDS = FetchWords("dcgm-exporter", "--dcgm.url", "--dcgm.timeout")


class HttpSource(_HttpSource):
    """dcgm-exporter's /metrics over HTTP, with --dcgm.max-body-size and --dcgm.timeout (see the generic fetch)."""

    def __init__(self, options: DcgmHttpOptions) -> None:
        super().__init__(options.endpoint, options.timeout_seconds, options.max_body_bytes, DCGM_FETCH_WORDS)
