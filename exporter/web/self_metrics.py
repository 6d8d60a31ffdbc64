"""The exporter's own metrics on /metrics: process, platform, scrape and connection counters, build info."""

from __future__ import annotations

import platform
from typing import Optional

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.web.connections import ConnectionTable


def build_self_registry(counters: SelfCollector) -> CollectorRegistry:
    """The registry /metrics serves: the process and platform collectors, our counters, build info."""
    registry = CollectorRegistry()
    registry.register(ProcessCollector(registry=None))
    registry.register(PlatformCollector(registry=None))
    registry.register(counters)
    registry.register(BuildInfoCollector())
    return registry


class SelfCollector:
    """Counters kept by the scraper and the refresher, exposed on /metrics."""

    def __init__(self, scraper, attribution):
        self._scraper = scraper
        self._attribution = attribution
        self.connections: Optional[ConnectionTable] = None  # the server's, once a server serves this app

    def collect(self):
        yield _counter("pod_gpu_exporter_scrapes", "Scrapes of the telemetry path answered.", self._scraper.scrapes)
        yield _counter("pod_gpu_exporter_rewrites", "Upstream bodies rewritten; the other scrapes reused the last rewrite.", self._scraper.rewrites)
        yield _counter("pod_gpu_exporter_rewrite_seconds", "Time spent rewriting upstream bodies (divide by pod_gpu_exporter_rewrites_total for the mean).", self._scraper.rewrite_seconds)
        yield _counter("pod_gpu_exporter_dcgm_fetch_failures", "Failed fetches of dcgm-exporter's metrics.", self._scraper.upstream_failures)
        yield _counter("pod_gpu_exporter_malformed_lines", "Upstream lines dropped as malformed, over all scrapes.", self._scraper.malformed_lines)
        yield _counter("pod_gpu_exporter_limited_labels", "Extra labels --labels.limit left off series, counted each time a GPU holder's series are built (after a change of mapping), not per scrape.", self._scraper.label_limit.dropped)
        yield _counter("pod_gpu_exporter_kubelet_list_calls", "PodResources List calls made to the kubelet.", self._attribution.list_calls)
        yield _counter("pod_gpu_exporter_kubelet_list_failures", "PodResources List calls that failed.", self._attribution.list_failures)
        if self.connections is not None:
            yield _counter("pod_gpu_exporter_http_connections_refused", "New connections closed at once because every connection slot was answering a request.", self.connections.refused)
            yield _counter("pod_gpu_exporter_http_idle_connections_closed", "Idle connections closed to make room for new ones when every slot was taken.", self.connections.evicted)


class BuildInfoCollector:
    """pod_gpu_exporter_build_info: which release runs on which Python, as node_exporter's *_build_info does."""

    def collect(self):
        info = GaugeMetricFamily("pod_gpu_exporter_build_info",
                                 "A constant 1, labelled with the exporter's version and the Python version running it.",
                                 labels=["version", "python_version"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)
