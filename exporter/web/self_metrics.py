"""The exporter's own metrics on /metrics: process, platform, scrape and connection counters, build info."""

from __future__ import annotations

import platform
from typing import Callable, Optional

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from exporter import __version__
from exporter.base.bounded import timeouts_total
from exporter.exposition import families
from exporter.exposition.families import Family
from exporter.exposition.sections import SectionFailures
from exporter.sources.kubernetes.status import KubernetesStatus
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
    """Counters kept by the scraper and the refresher, exposed on /metrics."""

    def __init__(self, scraper, attribution, kubernetes_status: Optional[Callable[[], KubernetesStatus]] = None):
        self._scraper = scraper
        self._attribution = attribution
        # The Kubernetes source's status(): an immutable snapshot of its watches; None with the API off.
        self._kubernetes_status = kubernetes_status
        self.connections: Optional[ConnectionTable] = None  # the server's, once a server serves this app

    def parts(self):
        """Its families in parts, each a collector of its own: one that fails costs only its own."""
        return tuple((name, _Part(collect)) for name, collect in (
            ("scrapes", self._scrape_counters), ("kubernetes", self._kubernetes), ("connections", self._connections),
            ("sections", lambda: _section_states(self._scraper.section_states()))))

    def _scrape_counters(self):
        yield _family_object(families.SCRAPES, self._scraper.scrapes)
        yield _family_object(families.REWRITES, self._scraper.rewrites)
        yield _family_object(families.REWRITE_SECONDS, self._scraper.rewrite_seconds)
        yield _family_object(families.DCGM_FETCH_FAILURES, self._scraper.upstream_failures)
        yield _family_object(families.MALFORMED_LINES_TOTAL, self._scraper.malformed_lines)
        yield _family_object(families.LIMITED_LABELS, self._scraper.label_limit.dropped)
        yield _family_object(families.KUBELET_LIST_CALLS, self._attribution.list_calls)
        yield _family_object(families.KUBELET_LIST_FAILURES, self._attribution.list_failures)

    def _kubernetes(self):
        if self._kubernetes_status is not None:
            yield from _kubernetes_counters(self._kubernetes_status())
        yield _family_object(families.NVML_TIMEOUTS, timeouts_total())

    def _connections(self):
        if self.connections is not None:
            yield _family_object(families.HTTP_CONNECTIONS_REFUSED, self.connections.refused)
            yield _family_object(families.HTTP_IDLE_CONNECTIONS_CLOSED, self.connections.evicted)


class _Part:
    """One generator function as a collector."""

    def __init__(self, collect: Callable):
        self.collect = collect


def _kubernetes_counters(status: KubernetesStatus):
    """The API watches' own counters, by resource (`pods`, `resourceslices`, `devicetaintrules`), from the source's status snapshot."""
    requests = _family_object(families.KUBERNETES_REQUESTS)
    dropped = _family_object(families.KUBERNETES_WATCH_DROPPED)
    skipped = _family_object(families.KUBERNETES_OBJECTS_SKIPPED)
    for watch in status.watches:
        requests.add_metric([watch.resource], watch.requests)
        for reason in ("silent", "too_large", "undecodable"):
            dropped.add_metric([watch.resource, reason], watch.dropped.get(reason, 0))
        # "unsupported" (a DeviceTaintRule selecting by what is not evaluated) only where it happened.
        for reason in sorted({"malformed", "other_node", *watch.skipped}):
            skipped.add_metric([watch.resource, reason], watch.skipped.get(reason, 0))
    malformed = _family_object(families.KUBERNETES_ANNOTATIONS_MALFORMED)
    malformed.add_metric(["hami.io/vgpu-devices-allocated"], status.malformed_annotations)
    yield from (requests, dropped, skipped, malformed)


def _section_states(states):
    """Each section's up and last refresh duration, by section (a duration only once it has one)."""
    up = _family_object(families.SECTION_UP)
    duration = _family_object(families.SECTION_DURATION)
    for name, state in states:
        up.add_metric([name], int(state.up))
        if state.duration_seconds is not None:
            duration.add_metric([name], state.duration_seconds)
    yield from (up, duration)


class BuildInfoCollector:
    """pod_gpu_exporter_build_info: which release runs on which Python, as node_exporter's *_build_info does."""

    def collect(self):
        info = _family_object(families.BUILD_INFO)
        info.add_metric([__version__, platform.python_version()], 1)
        yield info


def _family_object(family: Family, value: Optional[float] = None) -> Metric:
    """prometheus_client's object for a catalogued family, which writes its header from the entry: one
    unlabelled sample of `value`, or none yet and the family's labels for add_metric. A counter's name
    is given with `_total`, which prometheus_client takes off and writes back on every line."""
    kind = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
    if value is not None:
        return kind(family.name, family.help, value=value)
    return kind(family.name, family.help, labels=list(family.labels))
