"""One /gpu/metrics response: fetch dcgm text, rewrite it with the current mapping, add status gauges."""

from __future__ import annotations

import threading
import time
from typing import List, NamedTuple, Optional

from exporter.attribution import Attribution, Snapshot
from exporter.devices import Mapping
from exporter.errors import UpstreamError
from exporter.exposition import Rewriter, RewriteResult, render_allocation_info
from exporter.logs import DependencyReporter

_STATUS_HELP = {
    "pod_gpu_exporter_dcgm_up": "1 when dcgm-exporter's metrics were fetched for this scrape, else 0 (and no GPU series).",
    "pod_gpu_exporter_kubelet_up": "1 when the last kubelet PodResources List succeeded, else 0.",
    "pod_gpu_exporter_mapping_age_seconds": "Seconds since the GPU to pod mapping in use was listed from the kubelet.",
    "pod_gpu_exporter_malformed_lines": "Upstream lines dropped from this scrape because they break the text format.",
    "pod_gpu_exporter_unresolved_devices": "Allocated GPU devices whose samples cannot be identified (e.g. MIG-<uuid> without NVML).",
    "pod_gpu_exporter_scrape_duration_seconds": "Time this exporter took to answer this scrape, upstream fetch included.",
}


class _Cached(NamedTuple):
    body: bytes
    mapping: Mapping
    result: RewriteResult
    allocation_info: bytes


class Scraper:
    """Builds scrape responses; safe to call from many request threads at once."""

    def __init__(self, source, attribution: Attribution, labels_style: str):
        self._source = source
        self._attribution = attribution
        self._style = labels_style
        self._reporter = DependencyReporter("dcgm-exporter")
        self._lock = threading.Lock()
        self._rewriter: Optional[Rewriter] = None
        self._cached: Optional[_Cached] = None
        self.scrapes = 0
        self.upstream_failures = 0
        self.malformed_lines = 0

    def scrape(self) -> bytes:
        started = time.perf_counter()
        snapshot = self._attribution.current()
        body = self._fetch()
        parts: List[bytes] = []
        malformed = 0
        if body is not None:
            cached = self._rewrite(body, snapshot.mapping)
            parts += [cached.result.text, cached.allocation_info]
            malformed = cached.result.malformed
        else:
            # Without upstream samples there is nothing to join, but allocations are still known.
            parts.append(render_allocation_info(snapshot.mapping, frozenset(), self._style).encode())
        with self._lock:
            self.scrapes += 1
            self.malformed_lines += malformed
        status = self._status(body is not None, snapshot, malformed, time.perf_counter() - started)
        parts.append(status.encode())
        return b"".join(parts)

    def _fetch(self) -> Optional[bytes]:
        try:
            body = self._source.fetch()
        except UpstreamError as exc:
            with self._lock:
                self.upstream_failures += 1
            self._reporter.failed(exc.reason, str(exc), source=self._source.describe())
            return None
        self._reporter.succeeded(f"dcgm-exporter answering again", source=self._source.describe())
        return body

    def _rewrite(self, body: bytes, mapping: Mapping) -> _Cached:
        # dcgm-exporter refreshes its values every 30 s by default while Prometheus may scrape far more
        # often: an unchanged body under an unchanged mapping is answered from the last rewrite.
        cached = self._cached
        if cached is not None and cached.mapping is mapping and cached.body == body:
            return cached
        rewriter = self._rewriter
        if rewriter is None or rewriter.mapping is not mapping:
            rewriter = self._rewriter = Rewriter(mapping, self._style)
        result = rewriter.rewrite(body)
        allocation_info = render_allocation_info(mapping, result.identities, self._style).encode()
        cached = self._cached = _Cached(body, mapping, result, allocation_info)
        return cached

    def _status(self, dcgm_up: bool, snapshot: Snapshot, malformed: int, duration: float) -> str:
        values = {
            "pod_gpu_exporter_dcgm_up": int(dcgm_up),
            "pod_gpu_exporter_kubelet_up": int(snapshot.kubelet_up),
            "pod_gpu_exporter_mapping_age_seconds": None if snapshot.age_seconds is None else round(snapshot.age_seconds, 3),
            "pod_gpu_exporter_malformed_lines": malformed,
            "pod_gpu_exporter_unresolved_devices": len(snapshot.mapping.unresolved),
            "pod_gpu_exporter_scrape_duration_seconds": round(duration, 6),
        }
        lines = []
        for name, value in values.items():
            lines += [f"# HELP {name} {_STATUS_HELP[name]}", f"# TYPE {name} gauge"]
            if value is not None:
                lines.append(f"{name} {value}")
        return "\n".join(lines) + "\n"
