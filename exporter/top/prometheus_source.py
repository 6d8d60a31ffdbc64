"""Readings from Prometheus's HTTP API: instant queries, counters as rate() over the window."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Optional, Tuple

from exporter.top.errors import TopSourceError
from exporter.top.families import COUNTERS, GAUGES, PRESENCE
from exporter.top.readings import CLUSTER, Readings

MAX_ANSWER_BYTES = 64 * 1024 * 1024  # one query's JSON; a cluster's GPU series are a few megabytes
_SCRAPE_LABELS = frozenset(("instance", "job", "endpoint", "service"))  # the scrape's, not the series' own


@dataclass(frozen=True)
class PrometheusAccess:
    url: str  # the server's root, e.g. http://prometheus:9090 (a path prefix kept)
    timeout_seconds: float = 10.0
    user: Optional[str] = None  # basic auth: the user, else the URL's
    password: Optional[str] = None  # with the user: this, else the URL's
    bearer_token: Optional[str] = None
    headers: Tuple[Tuple[str, str], ...] = ()  # sent with every query, last: a tenant's X-Scope-OrgID


class PrometheusSource:
    """Asks one Prometheus-compatible query API (Prometheus, Thanos Query, Mimir, VictoriaMetrics...) for the
    exporter's families across every node and cluster it holds. It uses nothing but instant queries
    (/api/v1/query, GET) of plain selectors and rate(), which every one of them answers alike."""

    def __init__(self, access: PrometheusAccess, window_seconds: float, cluster_label: str = "cluster",
                 cluster: Optional[str] = None):
        """`cluster_label` names a series' cluster; `cluster`, when given, is the only one asked for: a
        central store holds every cluster's series, and the matcher keeps the others out of the answers."""
        self._access, self._cluster_label = access, cluster_label
        self._matcher = f"{cluster_label}={json.dumps(cluster)}" if cluster is not None else ""
        self._window = f"{max(1, round(window_seconds * 1000))}ms"  # PromQL durations take whole units
        parts = urllib.parse.urlsplit(access.url)
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else (parts.hostname or "")
        netloc = host + (f":{parts.port}" if parts.port else "")
        # Shown in messages and asked: the URL without the credentials it may carry (user:password@).
        self._root = self._shown = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._headers = {"Accept": "application/json"}
        user = access.user or (urllib.parse.unquote(parts.username) if parts.username else None)
        password = access.password if access.password is not None else urllib.parse.unquote(parts.password or "")
        if user:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        elif access.bearer_token:
            self._headers["Authorization"] = f"Bearer {access.bearer_token}"
        self._headers.update(access.headers)

    def read(self) -> Readings:
        if not self.query(self._selector(PRESENCE)):
            within = f" with {self._matcher}" if self._matcher else ""
            raise TopSourceError(f"Prometheus at {self._shown} has no {PRESENCE} series{within}: is it scraping "
                                 "pod-gpu-metrics-exporter's /gpu/metrics?", "empty")
        readings, seen = Readings(), set()
        names = "|".join(GAUGES)
        gauges = self.query("{" + ",".join(filter(None, (f'__name__=~"{names}"', self._matcher))) + "}")
        results = [(r["metric"].get("__name__", ""), r) for r in gauges]
        for counter in COUNTERS:
            results += [(counter, r) for r in self.query(f"rate({self._selector(counter)}[{self._window}])")]
        for family, result in results:
            labels = _labels(result["metric"], self._cluster_label)
            # One exporter scraped by two jobs (a ServiceMonitor and annotations) is counted once.
            key = (family, frozenset((k, v) for k, v in labels.items() if k not in _SCRAPE_LABELS))
            if key not in seen:
                seen.add(key)
                readings.add(family, labels, _value(result))
        return readings

    def _selector(self, family: str) -> str:
        return f"{family}{{{self._matcher}}}" if self._matcher else family

    def query(self, promql: str) -> list:
        url = f"{self._root}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        request = urllib.request.Request(url, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self._access.timeout_seconds) as response:
                body = response.read(MAX_ANSWER_BYTES + 1)
                # read(n) returns what came before a cut connection: the bytes promised and not sent say so.
                if len(body) <= MAX_ANSWER_BYTES and response.length:
                    raise http.client.IncompleteRead(body, response.length)
        except urllib.error.HTTPError as exc:
            raise TopSourceError(f"Prometheus at {self._shown} answered HTTP {exc.code} {exc.reason}"
                                 f"{_hint(exc.code)}", "status") from None
        except http.client.HTTPException as exc:  # not HTTP at all, or the connection cut mid-answer
            raise TopSourceError(f"Prometheus at {self._shown} gave a broken HTTP answer: "
                                 f"{_one_line(type(exc).__name__ + ': ' + str(exc))}", "unreachable") from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TopSourceError(f"Prometheus at {self._shown} cannot be reached: {reason}", "unreachable") from None
        if len(body) > MAX_ANSWER_BYTES:
            raise TopSourceError(f"Prometheus at {self._shown}: an answer larger than {MAX_ANSWER_BYTES} bytes", "status")
        try:
            answer = json.loads(body)
            return answer["data"]["result"] if answer.get("status") == "success" else _failed(self._shown, answer)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise TopSourceError(f"Prometheus at {self._shown} answered something other than its query API's "
                                 "JSON: is the URL Prometheus's root (e.g. http://prometheus:9090)?", "status") from None


def _one_line(text: str) -> str:
    """What a peer sent, as one short line: a garbage status line may carry newlines of its own."""
    return " ".join(text.split())[:200]


def _failed(shown: str, answer: dict) -> list:
    raise TopSourceError(f"Prometheus at {shown} refused the query: {answer.get('error', answer)}", "status")


def _hint(code: int) -> str:
    if code in (401, 403):
        return (" (give --prometheus.user and a password, or --prometheus.bearer-token-file; a multi-tenant store "
                "such as Mimir: --prometheus.header 'X-Scope-OrgID: <tenant>')")
    if code == 404:
        return " (is the URL Prometheus's root, e.g. http://prometheus:9090?)"
    return ""


def _labels(metric: dict, cluster_label: str) -> dict:
    """The series' labels; `node` is the node label a scrape config sets (the project's does), else the target;
    `cluster` the value of `cluster_label` where the series carries it (external labels, remote write)."""
    labels = {k: v for k, v in metric.items() if k not in ("__name__", CLUSTER, cluster_label)}
    labels["node"] = metric.get("node") or metric.get("instance", "")
    if metric.get(cluster_label):
        labels[CLUSTER] = metric[cluster_label]
    return labels


def _value(result: dict) -> float:
    try:
        return float(result["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return float("nan")
