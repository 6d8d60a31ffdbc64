"""Readings from Prometheus's HTTP API: instant queries; counters as their rate over the samples in the window."""

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
from exporter.top.readings import CLUSTER, Readings, rate_over_samples

MAX_ANSWER_BYTES = 64 * 1024 * 1024  # one query's JSON; a cluster's GPU series are a few megabytes
_ERROR_BODY_BYTES = 4096  # of a refusal's body: its message is in the first line
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
    (/api/v1/query, GET) of plain selectors, with a range (`family[window]`) for the counters, which every
    one of them answers alike: the samples stored. A counter's rate is worked out here, over the time its
    samples span (readings.rate_over_samples), not by rate(), which a series younger than the window
    dilutes, and which VictoriaMetrics computes otherwise."""

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
        # NVIDIA's dcgm_up first, as always; then upstream_up, which an AMD node serves instead.
        if not any(self.query(self._selector(name)) for name in PRESENCE):
            raise self._empty()
        readings, seen = Readings(), set()
        # The counters' latest samples too: one with no rate below has too few samples in the window yet.
        names = "|".join(GAUGES + COUNTERS + PRESENCE)  # the presence gauges say which vendor an old exporter serves
        now = self.query("{" + ",".join(filter(None, (f'__name__=~"{names}"', self._matcher))) + "}")
        for result in now:
            if result["metric"].get("__name__", "") not in COUNTERS:
                self._add(readings, seen, result["metric"].get("__name__", ""), result["metric"], _value(result))
        counters = [result for result in now if result["metric"].get("__name__", "") in COUNTERS]
        for counter in COUNTERS:
            for result in self.query(f"{self._selector(counter)}[{self._window}]"):
                rate = rate_over_samples(_points(result))
                if rate is not None:  # rated first: of one series scraped by two jobs, the one with a rate
                    self._add(readings, seen, counter, result["metric"], rate)
                counters.append({"metric": {**result["metric"], "__name__": counter}})
        for result in counters:
            self._add(readings, seen, result["metric"]["__name__"], result["metric"], None)
        return readings

    def _add(self, readings: Readings, seen: set, family: str, metric: dict, value: Optional[float]) -> None:
        """One series, once: one exporter scraped by two jobs (a ServiceMonitor and annotations) counts once.
        A counter without a rate (value None) is recorded as unrated."""
        labels = _labels(metric, self._cluster_label)
        key = (family, frozenset((k, v) for k, v in labels.items() if k not in _SCRAPE_LABELS))
        if key in seen:
            return
        seen.add(key)
        if value is None:
            readings.add_unrated(family, labels)
        else:
            readings.add(family, labels, value)

    def _empty(self) -> TopSourceError:
        """No exporter's series (with --cluster: none of that cluster's, naming the clusters there are)."""
        within = ""
        if self._matcher:
            present = '{__name__=~"' + "|".join(PRESENCE) + '"}'
            found = sorted({r["metric"].get(self._cluster_label, "") for r in
                            self.query(f"count by ({self._cluster_label}) ({present})")} - {""})
            there = f"its clusters: {', '.join(found)}" if found else f"no series of it carries {self._cluster_label}"
            within = f" with {self._matcher} ({there})"
        # Named by NVIDIA's family, as it always was: an AMD exporter's upstream_up is looked for as well.
        return TopSourceError(f"Prometheus at {self._shown} has no {PRESENCE[0]} series{within}: is it scraping "
                              "pod-gpu-metrics-exporter's /gpu/metrics?", "empty")

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
            said, refused = _error_body(exc)
            raise TopSourceError(f"Prometheus at {self._shown} answered HTTP {exc.code} {exc.reason} to the query "
                                 f"{_one_line(promql)[:120]}{': ' + said if said else ''}{_hint(exc.code, refused)}",
                                 "status") from None
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


def _error_body(exc: urllib.error.HTTPError) -> Tuple[str, bool]:
    """What the server said (a query API's JSON `error`, else its text's first line, short), and whether it
    is a query API's own refusal of the query (its JSON error: `"status": "error"` and an `errorType`)."""
    try:
        body = exc.read(_ERROR_BODY_BYTES).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException, AttributeError):
        return "", False
    try:
        answer = json.loads(body)
        if isinstance(answer, dict) and answer.get("status") == "error":
            return _one_line(str(answer.get("error", "")))[:300], bool(answer.get("errorType"))
    except ValueError:
        pass
    return _one_line(body.strip().split("\n", 1)[0] if body.strip() else "")[:300], False


def _hint(code: int, refused: bool = False) -> str:
    if code in (400, 404, 405) and not refused:
        return (" (no query API there: is the URL Prometheus's root, or that of Thanos Query, VictoriaMetrics, "
                "Mimir or Cortex, e.g. http://prometheus:9090? vmalert, Alertmanager and agents serve none)")
    if code in (401, 403):
        return (" (give --prometheus.user and a password, or --prometheus.bearer-token-file; a multi-tenant store "
                "such as Mimir: --prometheus.header 'X-Scope-OrgID: <tenant>')")
    return ""


def _labels(metric: dict, cluster_label: str) -> dict:
    """The series' labels; `node` is the node label a scrape config sets (the project's does), else the target;
    `cluster` the value of `cluster_label` where the series carries it (external labels, remote write)."""
    labels = {k: v for k, v in metric.items() if k not in ("__name__", CLUSTER, cluster_label)}
    labels["node"] = metric.get("node") or metric.get("instance", "")
    if metric.get(cluster_label):
        labels[CLUSTER] = metric[cluster_label]
    return labels


def _points(result: dict) -> list:
    """A range answer's samples, (time, value) in time order; an unreadable one is left out."""
    points = []
    for pair in result.get("values") or ():
        try:
            points.append((float(pair[0]), float(pair[1])))
        except (IndexError, TypeError, ValueError):
            continue
    return points


def _value(result: dict) -> float:
    try:
        return float(result["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return float("nan")
