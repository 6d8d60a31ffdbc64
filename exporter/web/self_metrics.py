"""The exporter's own metrics on /metrics: process, platform, scrape and connection counters, build info."""

from __future__ import annotations

import platform
from typing import Callable, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.base.bounded import timeouts_total
from exporter.exposition import families
from exporter.exposition.sections import SectionFailures
from exporter.web.connections import ConnectionTable


def build_self_registry(counters: SelfCollector) -> CollectorRegistry:
    """The registry /metrics serves: the process and platform collectors, our counters, build info."""
    registry = CollectorRegistry()
    failures = SectionFailures("part")  # one failing part of /metrics costs only its own families
    parts = (("process", ProcessCollector(registry=None)), ("platform", PlatformCollector(registry=None)),
             *counters.parts(), ("build_info", BuildInfoCollector()))
    for name, collector in parts:
        registry.register(GuardedCollector(name, collector, failures))
    return registry


class GuardedCollector:
    """A collector whose failure leaves its own families out of /metrics and the rest served, logged once."""

    def __init__(self, name: str, collector, failures: SectionFailures):
        self._name = name
        self._collector = collector
        self._failures = failures

    def collect(self):
        try:
            families_read = list(self._collector.collect())  # whole, so that a failure leaves no half family
        except Exception as exc:
            self._failures.failed(self._name, exc)
            return []
        self._failures.succeeded(self._name)
        return families_read


class SelfCollector:
    """Counters kept by the scraper and the refresher, and each collector's own part, exposed on /metrics."""

    def __init__(self, scraper, attribution, collectors=None):
        self._scraper = scraper
        self._attribution = attribution
        # The collectors of this run: their parts of /metrics (self_metrics_parts()); None for none.
        self._collectors = collectors
        self.connections: Optional[ConnectionTable] = None  # the server's, once a server serves this app

    def parts(self):
        """Its families in parts, each a collector of its own: one that fails costs only its own."""
        theirs = self._collectors.self_metrics_parts() if self._collectors is not None else ()
        return tuple((name, _Part(collect)) for name, collect in (
            ("scrapes", self._scrape_counters), *theirs, ("bounded_calls", self._bounded_calls), ("connections", self._connections),
            ("sections", lambda: _section_states(self._scraper.section_states(), self._section_up()))))

    def _section_up(self):
        """section_up with every collector's sections told, as the run's registry writes it; the core's without one."""
        return getattr(self._collectors, "section_up", families.SECTION_UP)

    def _vendor_family(self, field: str):
        """The vendor's own name for one of the counters below (None: it has none, or no collectors here)."""
        vendor = getattr(self._collectors, "vendor", None)
        return getattr(vendor, field, None)

    def _scrape_counters(self):
        yield families.client_family(families.SCRAPES, self._scraper.scrapes)
        yield families.client_family(families.REWRITES, self._scraper.rewrites)
        yield families.client_family(families.REWRITE_SECONDS, self._scraper.rewrite_seconds)
        upstream_failures = self._vendor_family("upstream_failures")
        if upstream_failures is not None:
            yield families.client_family(upstream_failures, self._scraper.upstream_failures)
        yield families.client_family(families.MALFORMED_LINES_TOTAL, self._scraper.malformed_lines)
        yield families.client_family(families.LIMITED_LABELS, self._scraper.label_limit.dropped)
        yield families.client_family(families.KUBELET_LIST_CALLS, self._attribution.list_calls)
        yield families.client_family(families.KUBELET_LIST_FAILURES, self._attribution.list_failures)

    def _bounded_calls(self):
        driver_timeouts = self._vendor_family("driver_timeouts")
        if driver_timeouts is not None:
            yield families.client_family(driver_timeouts, timeouts_total())

    def _connections(self):
        if self.connections is not None:
            yield families.client_family(families.HTTP_CONNECTIONS_REFUSED, self.connections.refused)
            yield families.client_family(families.HTTP_IDLE_CONNECTIONS_CLOSED, self.connections.evicted)


class _Part:
    """One generator function as a collector."""

    def __init__(self, collect: Callable):
        self.collect = collect


def _section_states(states, up_family):
    """Each section's up and last refresh duration, by section (a duration only once it has one)."""
    up = families.client_family(up_family)
    duration = families.client_family(families.SECTION_DURATION)
    for name, state in states:
        up.add_metric([name], int(state.up))
        if state.duration_seconds is not None:
            duration.add_metric([name], state.duration_seconds)
    yield from (up, duration)


class BuildInfoCollector:
    """pod_gpu_exporter_build_info: which release runs on which Python, as node_exporter's *_build_info does."""

    def collect(self):
        info = families.client_family(families.BUILD_INFO)
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
