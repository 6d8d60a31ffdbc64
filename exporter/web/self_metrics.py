"""The exporter's own metrics on /metrics: process, platform, scrape and connection counters, build info."""

from __future__ import annotations

import platform
from typing import Callable, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.base.bounded import timeouts_total
from exporter.sources.kubernetes.status import KubernetesStatus
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

    def __init__(self, scraper, attribution, kubernetes_status: Optional[Callable[[], KubernetesStatus]] = None):
        self._scraper = scraper
        self._attribution = attribution
        # The Kubernetes source's status(): an immutable snapshot of its watches; None with the API off.
        self._kubernetes_status = kubernetes_status
        self.connections: Optional[ConnectionTable] = None  # the server's, once a server serves this app

    def collect(self):
        yield _counter("pod_gpu_exporter_scrapes", "Scrapes of the telemetry path answered.", self._scraper.scrapes)
        yield _counter("pod_gpu_exporter_rewrites", "Upstream bodies rewritten; the other scrapes reused the last rewrite.", self._scraper.rewrites)
        yield _counter("pod_gpu_exporter_rewrite_seconds", "Time spent rewriting upstream bodies (divide by pod_gpu_exporter_rewrites_total for the mean).", self._scraper.rewrite_seconds)
        yield _counter("pod_gpu_exporter_dcgm_fetch_failures", "Failed fetches of dcgm-exporter's metrics.", self._scraper.upstream_failures)
        yield _counter("pod_gpu_exporter_malformed_lines", "Upstream lines dropped as malformed, over all scrapes.", self._scraper.malformed_lines)
        yield _counter("pod_gpu_exporter_limited_labels", "Extra labels --labels.limit left off series, counted once for each distinct cut (a holder's extras beside as many other labels), not per scrape nor per mapping.", self._scraper.label_limit.dropped)
        yield _counter("pod_gpu_exporter_kubelet_list_calls", "PodResources List calls made to the kubelet.", self._attribution.list_calls)
        yield _counter("pod_gpu_exporter_kubelet_list_failures", "PodResources List calls that failed.", self._attribution.list_failures)
        if self._kubernetes_status is not None:
            yield from _kubernetes_counters(self._kubernetes_status())
        yield _counter("pod_gpu_exporter_nvml_timeouts", "NVML calls (nvmlInit, MIG lookups, per-process reads) that did not return within their bound, or were refused while one still had not.", timeouts_total())
        if self.connections is not None:
            yield _counter("pod_gpu_exporter_http_connections_refused", "New connections closed at once because every connection slot was answering a request.", self.connections.refused)
            yield _counter("pod_gpu_exporter_http_idle_connections_closed", "Idle connections closed to make room for new ones when every slot was taken.", self.connections.evicted)


def _kubernetes_counters(status: KubernetesStatus):
    """The API watches' own counters, by resource (`pods`, `resourceslices`), from the source's status snapshot."""
    requests = CounterMetricFamily("pod_gpu_exporter_kubernetes_requests", "List and watch requests made to the Kubernetes API server (a list's pages count once).", labels=["resource"])
    dropped = CounterMetricFamily("pod_gpu_exporter_kubernetes_watch_dropped", "Watch connections the exporter closed: nothing arrived within --kubernetes.watch-silence-timeout (silent), or a line went past the 4 MiB cap (too_large).", labels=["resource", "reason"])
    skipped = CounterMetricFamily("pod_gpu_exporter_kubernetes_objects_skipped", "Objects from the Kubernetes API left out of the cache: not of the shape read (malformed), or bound to another node (other_node).", labels=["resource", "reason"])
    for watch in status.watches:
        requests.add_metric([watch.resource], watch.requests)
        for reason in ("silent", "too_large"):
            dropped.add_metric([watch.resource, reason], watch.dropped.get(reason, 0))
        for reason in ("malformed", "other_node"):
            skipped.add_metric([watch.resource, reason], watch.skipped.get(reason, 0))
    yield from (requests, dropped, skipped)


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
