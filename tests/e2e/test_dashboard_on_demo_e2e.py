"""Every query of the shipped Grafana dashboard, run by a real Prometheus (with the shipped rules)
scraping the demo: none may fail, and each panel the demo's data feeds must show data."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from support.demo_process import start_demo
from support.deploy_tools import DASHBOARD, PROMETHEUS_DIR, require_executable
from support.prometheus_server import PrometheusServer, get_json
from support.waiting import wait_until

# Panels the demo cannot feed, by title, each with why. The demo simulates a node in --sharing.mode
# process with the Kubernetes API (a DRA ResourceSlice, a Kueue-queued pod), which feeds all the others.
NOT_FED_BY_THE_DEMO = {
    "Allocated share of nominal GPU quota": "divides by kueue_cluster_queue_nominal_quota, which only "
                                            "Kueue's own controller exports",
}
# What Grafana puts in place of its variables and macros when a user picks "All".
SUBSTITUTIONS = {"$cluster": ".*", "$vendor": ".*", "$namespace": ".*", "$pod": ".*", "$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
DEADLINE_SECONDS = 60.0


def _expand(expr: str) -> str:
    for variable in sorted(SUBSTITUTIONS, key=len, reverse=True):  # $__rate_interval before $__range
        expr = expr.replace(variable, SUBSTITUTIONS[variable])
    return expr


def _queries(dashboard: dict) -> list:
    """(what, PromQL) for every panel target (rows' nested panels too) and every label_values variable."""
    panels = list(dashboard["panels"])
    panels += [inner for panel in dashboard["panels"] for inner in panel.get("panels", [])]
    queries = [(f'panel "{panel.get("title")}"', _expand(target["expr"]))
               for panel in panels for target in panel.get("targets", []) if target.get("expr")]
    for variable in dashboard.get("templating", {}).get("list", []):
        match = re.fullmatch(r"label_values\((.+), *(\w+)\)", variable.get("definition", ""))
        if match:  # what Grafana asks for the variable's choices, as a query with the same answer
            queries.append((f'variable "{variable["name"]}"', f"count by ({match.group(2)}) ({_expand(match.group(1))})"))
    return queries


@pytest.fixture(scope="module")
def prometheus():
    binary = require_executable("prometheus", "apt-get install -y prometheus (.ci/system-packages.sh does)")
    folder = Path(tempfile.mkdtemp(prefix="pgx-dash-", dir="/tmp"))
    demo = start_demo()
    server = None
    try:
        server = PrometheusServer(binary, folder, {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": sorted(str(path) for path in (PROMETHEUS_DIR / "rules").glob("*.rules.yml")),
            "scrape_configs": [{"job_name": "pod-gpu-metrics", "metrics_path": "/gpu/metrics", "honor_labels": True,
                                "static_configs": [{"targets": [urllib.parse.urlsplit(demo.url()).netloc]}]}],
        })
        yield server
    finally:
        if server is not None:
            server.stop()
        demo.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _run(prometheus: PrometheusServer, promql: str):
    """The query's result, or its error as Prometheus words it."""
    try:
        answer = get_json(prometheus.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    except urllib.error.HTTPError as exc:
        answer = json.load(exc)
    if answer.get("status") != "success":
        return f'error: {answer.get("error")}'
    return answer["data"]["result"]


def test_every_dashboard_query_runs_and_shows_the_demos_data(prometheus):
    queries = [(what, promql) for what, promql in _queries(json.loads(DASHBOARD.read_text()))
               if what.removeprefix("panel ").strip('"') not in NOT_FED_BY_THE_DEMO]
    assert len(queries) >= 10
    errors = [(what, promql, result) for what, promql in queries
              if isinstance(result := _run(prometheus, promql), str)]
    assert errors == [], f"dashboard queries Prometheus refuses: {errors}"
    empty: list = []

    def all_fed() -> bool:
        empty[:] = [(what, promql) for what, promql in queries if not _run(prometheus, promql)]
        return not empty

    try:
        wait_until(all_fed, DEADLINE_SECONDS, 1.0, "every panel to show the demo's data")
    except AssertionError:
        pytest.fail(f"dashboard queries with no data from the demo after {DEADLINE_SECONDS:g} s: {empty}")
