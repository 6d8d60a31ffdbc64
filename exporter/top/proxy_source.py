"""Readings without Prometheus: each exporter pod scraped through the API server's pod proxy, twice a window apart.

As `kubectl top` reads the kubelets through the API server when no monitoring stack is installed,
this needs nothing but the exporter and the right to `get` `pods/proxy` in its namespace.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from exporter.top.errors import TopSourceError
from exporter.top.pod_scrape import ExporterPod, ScrapeFailed, scrape_pod
from exporter.top.readings import Readings, add_scrapes

RBAC_HINT = ("grant `get` on `pods/proxy` (and `list` on `pods`) in that namespace: the chart's "
             "top.rbac.create, or deploy/kubectl-gpu-top-rbac.yaml")


@dataclass(frozen=True)
class ProxyAccess:
    namespace: str = "gpu-monitoring"
    selector: str = "app.kubernetes.io/name=pod-gpu-metrics-exporter"
    port: str = "9400"
    scheme: str = "http"
    path: str = "/gpu/metrics"
    timeout_seconds: float = 10.0  # one scrape, whole answer
    round_seconds: float = 30.0  # every pod's scrape in one round
    max_body_bytes: int = 32 * 1024 * 1024
    concurrency: int = 32


Scraped = Tuple[float, Dict]  # (monotonic time, (family, labels) → value)


class ProxySource:
    """Scrapes the exporter pods the selector finds; keeps each pod's last scrape, so that under --watch
    a frame needs one scrape per pod and its rates span the time since the last frame."""

    def __init__(self, client, access: ProxyAccess, window_seconds: float, sleep=time.sleep,
                 cluster: Optional[str] = None):
        """`cluster`: the name its rows carry, where top reads more than one (the context's)."""
        self._client, self._access, self._window, self._sleep = client, access, window_seconds, sleep
        self._cluster = cluster
        self._last: Dict[str, Scraped] = {}

    def read(self) -> Readings:
        pods = self.list_pods()
        if not pods:
            raise TopSourceError(f"no pod-gpu-metrics-exporter pods in namespace {self._access.namespace} with "
                                 f"labels {self._access.selector} (is it installed there? -N/--exporter.namespace, "
                                 "--exporter.selector)", "empty")
        first, failed = self._round(pods)
        previous = self._last
        if not previous:  # the first look: a second scrape a window later, for the counters' rates
            self._sleep(self._window)
            previous, (first, failed) = first, self._round(pods)
        readings = Readings(unreachable=[(pod.node or pod.name, why, self._cluster) for pod, why in failed])
        for pod in pods:
            if pod.name in first:
                before = previous.get(pod.name, first[pod.name])
                add_scrapes(readings, pod.node or pod.name, before[1], first[pod.name][1],
                            first[pod.name][0] - before[0], self._cluster)
        self._last = first
        return readings

    def list_pods(self) -> List[ExporterPod]:
        from lightkube.core.exceptions import ApiError
        from lightkube.core.generic_client import httpx
        from lightkube.resources.core_v1 import Pod

        from exporter.collectors.kubernetes.stream import http_client, list_pages

        try:
            pages = list(list_pages(self._client, Pod, self._access.namespace,
                                    {"labelSelector": self._access.selector}, 500))
        except ApiError as exc:
            raise _api_error(exc, self._access.namespace, "list", "pods") from None
        except httpx.HTTPError as exc:
            server = str(http_client(self._client).base_url).rstrip("/")
            raise TopSourceError(f"the Kubernetes API server at {server} cannot be reached: {exc}", "unreachable") from None
        return [_pod(json.loads(raw)) for _version, items in pages for raw in items]

    def _round(self, pods: List[ExporterPod]) -> Tuple[Dict[str, Scraped], List[Tuple[ExporterPod, str]]]:
        """One scrape of every running pod, `concurrency` at a time, all within `round_seconds`."""
        from exporter.collectors.kubernetes.stream import http_client

        http = http_client(self._client)
        deadline = time.monotonic() + self._access.round_seconds
        running = [pod for pod in pods if pod.phase == "Running"]
        failed = [(pod, f"pod {pod.name} is {pod.phase or 'not running'}") for pod in pods if pod.phase != "Running"]
        scraped: Dict[str, Scraped] = {}
        pool = ThreadPoolExecutor(max_workers=max(1, min(self._access.concurrency, len(running) or 1)))
        try:
            futures = [(pod, pool.submit(scrape_pod, http, pod, self._access, deadline)) for pod in running]
            for pod, future in futures:
                try:
                    scraped[pod.name] = future.result()
                except ScrapeFailed as exc:
                    if exc.denied:  # true of every pod: stop at once rather than ask a thousand times
                        raise TopSourceError(exc.message + f": {RBAC_HINT}", "denied") from None
                    failed.append((pod, exc.message))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return scraped, failed


def _pod(obj: dict) -> ExporterPod:
    metadata, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return ExporterPod(metadata.get("namespace", ""), metadata.get("name", ""), spec.get("nodeName") or "",
                       status.get("phase") or "")


def _api_error(exc, namespace: str, verb: str, resource: str) -> TopSourceError:
    code = getattr(exc.status, "code", None)
    message = getattr(exc.status, "message", None) or str(exc)
    if code in (401, 403):
        return TopSourceError(f"the Kubernetes API server refused to {verb} {resource} in namespace {namespace} "
                              f"(HTTP {code}: {message}): {RBAC_HINT}", "denied")
    return TopSourceError(f"the Kubernetes API server answered HTTP {code} to {verb} {resource} in namespace "
                          f"{namespace}: {message}", "status")

