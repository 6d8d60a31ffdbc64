"""`top --prometheus` on a store holding two clusters: the demo scraped twice, once as `east` and once as
`west` (as each cluster's agent labels its series), read from a real Prometheus and from a real
VictoriaMetrics under a path prefix behind a tenant gateway."""

from __future__ import annotations

import shutil
import urllib.parse

import pytest

from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer
from support.query_stores import TenantGateway, VictoriaMetrics
from support.top_runs import own_sum, run_top, served, top_json, within_readings
from support.waiting import wait_until

WINDOW = "10s"
CLUSTERS = ("east", "west")
GPUS = {"trainer-0": 2, "llm-server-a": 0.5, "llm-server-b": 0.25}


def _scrape_configs(address: str) -> list:
    return [{"job_name": f"gpu-{cluster}", "metrics_path": "/gpu/metrics",
             "static_configs": [{"targets": [address], "labels": {"node": "demo-node", "cluster": cluster}}]}
            for cluster in CLUSTERS]


def _energy_in_window(query) -> bool:
    """Every energy series of both clusters holds a whole window: a rate of a younger one reads low."""
    found = query(f"min(count_over_time(pod_gpu_container_energy_joules_total[{WINDOW}])) >= 8")
    return bool(found) and len(query("count by (cluster) (pod_gpu_container_energy_joules_total)")) == 2


@pytest.fixture(scope="module")
def demo():
    from support.demo_process import start_demo

    exporter = start_demo()
    yield exporter
    exporter.stop()


@pytest.fixture(scope="module")
def prometheus(demo, tmp_path_factory):
    binary = shutil.which("prometheus") or pytest.skip("prometheus is not installed (apt-get install prometheus)")
    server = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus-clusters"),
                              {"global": {"scrape_interval": "1s"}, "scrape_configs": _scrape_configs(demo.address)})
    try:
        wait_until(lambda: _energy_in_window(server.query), 2 * DEADLINE_SECONDS, 0.5, "both clusters' energy")
        yield server
    finally:
        server.stop()


def _power(prometheus) -> dict:
    query = f"sum by (cluster, pod) (rate(pod_gpu_container_energy_joules_total[{WINDOW}]))"
    return {(r["metric"]["cluster"], r["metric"]["pod"]): float(r["value"][1]) for r in prometheus.query(query)}


def test_rows_of_the_two_clusters_stay_apart_each_with_its_own_amounts(prometheus, demo):
    before, power_before = served(demo.url()), _power(prometheus)
    document = top_json(["--prometheus", prometheus.url, "--window", WINDOW])
    after, power_after = served(demo.url()), _power(prometheus)
    rows = {(row["cluster"], row["pod"]): row for row in document["rows"]}
    assert set(rows) == {(cluster, pod) for cluster in CLUSTERS for pod in GPUS}, sorted(rows)
    for (cluster, pod), row in rows.items():
        assert row["gpus"] == GPUS[pod]  # not the two clusters' GPUs added
        readings = [own_sum(own, "pod_gpu_container_memory_used_bytes", pod) for own in (before, after)]
        assert within_readings(row["memory_bytes"], readings, 0.1 * max(readings) + 1), (cluster, pod, row, readings)
        low, high = sorted((power_before[cluster, pod], power_after[cluster, pod]))
        assert 0.6 * low <= row["power_watts"] <= 1.4 * high + 0.5, (cluster, pod, row["power_watts"], low, high)
    assert {entry["cluster"] for entry in document["unattributed"]} == set(CLUSTERS)


def test_the_table_shows_a_cluster_column_and_groups_and_filters_by_cluster(prometheus):
    run = run_top(["--prometheus", prometheus.url, "--window", WINDOW, "--sort", "name"])
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split()[:3] == ["CLUSTER", "NAMESPACE", "POD"]
    assert [line.split()[0] for line in lines[1:7]] == ["east"] * 3 + ["west"] * 3, run.stdout
    east = run_top(["--prometheus", prometheus.url, "--window", WINDOW, "--cluster", "east"])
    assert east.returncode == 0, east.stderr
    assert east.stdout.splitlines()[0].split()[0] == "NAMESPACE" and "CLUSTER " not in east.stdout
    assert len([line for line in east.stdout.splitlines() if line.split()[3:4] == ["demo-node"]]) == 3, east.stdout
    by_cluster = top_json(["--prometheus", prometheus.url, "--window", WINDOW, "--by", "cluster"])
    assert sorted((row["cluster"], row["gpus"], row["containers"]) for row in by_cluster["rows"]) == [
        ("east", 2.75, 3), ("west", 2.75, 3)]


def test_another_label_may_name_the_cluster(prometheus):
    """--cluster-label: here the scrape job stands for the cluster; the `cluster` label is then no cluster."""
    document = top_json(["--prometheus", prometheus.url, "--window", WINDOW, "--cluster-label", "job",
                         "--cluster", "gpu-west"])
    assert sorted((row["cluster"], row["pod"]) for row in document["rows"]) == [
        ("gpu-west", "llm-server-a"), ("gpu-west", "llm-server-b"), ("gpu-west", "trainer-0")]


def test_an_unknown_cluster_is_one_line(prometheus):
    run = run_top(["--prometheus", prometheus.url, "--cluster", "north"])
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert 'no pod_gpu_exporter_dcgm_up series with cluster="north" (its clusters: east, west)' in run.stderr


@pytest.mark.parametrize("header", ["X-Scope-OrgID team-a", "Bad Name: x", ": x", "X-Scope-OrgID"])
def test_a_malformed_header_is_a_bad_flag(header):
    run = run_top(["--prometheus", "http://127.0.0.1:1", "--prometheus.header", header])
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "--prometheus.header: expected 'Name: value'" in run.stderr, run.stderr


def test_victoria_metrics_under_a_path_prefix_behind_a_tenant_gateway(demo):
    store = VictoriaMetrics(_scrape_configs(demo.address), prefix="/prometheus")
    gateway = TenantGateway(store.url.rsplit("/prometheus", 1)[0], tenant="team-a")
    try:
        def query(promql):
            from support.prometheus_server import get_json
            return get_json(f"{store.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))["data"]["result"]

        wait_until(lambda: _energy_in_window(query), 2 * DEADLINE_SECONDS, 0.5, "both clusters in VictoriaMetrics")
        url = gateway.url + "/prometheus"
        document = top_json(["--prometheus", url, "--window", WINDOW, "--prometheus.header", "X-Scope-OrgID: team-a"])
        refused = run_top(["--prometheus", url, "--window", WINDOW])
    finally:
        gateway.stop()
        store.stop()
    rows = {(row["cluster"], row["pod"]): row for row in document["rows"]}
    assert set(rows) == {(cluster, pod) for cluster in CLUSTERS for pod in GPUS}, sorted(rows)
    assert all(rows[cluster, pod]["gpus"] == GPUS[pod] for cluster, pod in rows)
    assert all(row["power_watts"] and row["power_watts"] > 0 for (_, pod), row in rows.items() if pod == "trainer-0")
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "answered HTTP 401" in refused.stderr and "X-Scope-OrgID" in refused.stderr, refused.stderr
    assert "team-a" in gateway.asked and None in gateway.asked


def test_vmalert_is_no_query_api_and_top_says_what_it_asked_and_what_vmalert_said(tmp_path):
    """vmalert serves Prometheus's rules and alerts API, not its query API: it answers 400 to a query."""
    from support.victoria_metrics import VmProcess

    binary = shutil.which("vmalert") or pytest.skip("vmalert is not installed (apt-get install victoria-metrics)")
    (tmp_path / "rules.yml").write_text("groups: []\n")
    vmalert = VmProcess(binary, tmp_path, [f"-rule={tmp_path / 'rules.yml'}", "-datasource.url=http://127.0.0.1:1",
                                           "-notifier.url=http://127.0.0.1:1"])
    try:
        run = run_top(["--prometheus", vmalert.url])
    finally:
        vmalert.stop()
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert f"Prometheus at {vmalert.url} answered HTTP 400 Bad Request to the query pod_gpu_exporter_dcgm_up: " \
           in run.stderr, run.stderr
    assert 'unsupported path requested: "/api/v1/query"' in run.stderr, run.stderr  # vmalert's own words
    assert "vmalert, Alertmanager and agents serve none" in run.stderr, run.stderr


def test_a_query_the_store_refuses_is_its_own_words_without_the_hint(prometheus):
    """Prometheus's 400 to a query it cannot run is a query API's refusal: its JSON `error`, no hint."""
    from exporter.top.errors import TopSourceError
    from exporter.top.prometheus_source import PrometheusAccess, PrometheusSource

    with pytest.raises(TopSourceError) as refused:
        PrometheusSource(PrometheusAccess(prometheus.url), 10.0).query("rate(pod_gpu_exporter_dcgm_up)")
    assert "answered HTTP 400 Bad Request to the query rate(pod_gpu_exporter_dcgm_up): " in refused.value.message
    assert "expected type range vector" in refused.value.message, refused.value.message
    assert "serve none" not in refused.value.message
