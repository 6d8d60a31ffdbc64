"""`top --prometheus`: a real Prometheus scraping the demo, the table checked against the demo's own series."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
import urllib.parse
from collections import defaultdict

import pytest

from exporter.demo.explain import PROMETHEUS_URL
from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer, free_port, get_json
from support.exporter_process import REPO_ROOT, exporter_env
from support.top_runs import (own_sum, rows_by_pod, run_top, served, start_demo_keeping_its_text, top_json,
                              within_readings)
from support.waiting import wait_until

WINDOW = "20s"
# The energy counters step at each of the demo's per-process refreshes (every 2 s): a rate over 20 s of
# 1 s scrapes counts 9 or 10 of those steps, fewer while the series is younger than the window or when a
# loaded machine delays scrapes, so it is no constant: top's power is checked against the rates
# Prometheus itself reads from the same series over the same window, just before, during and after top's.
FULL, FULL_SAMPLES = "40s", 25  # 25 scrapes 1 s apart: the series began before the last 20 s
WINDOW_SECONDS = 20.0
EXTRAPOLATED = 1.2  # rate() stretches what it saw to the window's edges: by 20/19 with scrapes 1 s apart
RATE_STEP_SECONDS = 0.02  # how finely those rates are read between the moments before and after top


def _prometheus(tmp_path_factory, targets):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    # Two jobs scrape the same exporter, as a ServiceMonitor beside the prometheus.io annotations would:
    # each holder is still one row, its amounts counted once.
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": job, "metrics_path": "/gpu/metrics",
                                  "static_configs": [{"targets": targets, "labels": {"node": "demo-node"}}]}
                                 for job in ("pod-gpu-metrics-exporter", "gpu-monitoring/pod-gpu-metrics-exporter")]}
    return PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), config)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    demo, printed = start_demo_keeping_its_text()
    prometheus = _prometheus(tmp_path_factory, [demo.address])
    try:
        # Every energy series (of both jobs) older than the window: rate() divides by the whole window, so one
        # that began inside it reads low (a series 16 s old, about 0.8 of its power over 20 s).
        wait_until(lambda: prometheus.query(f"min(count_over_time(pod_gpu_container_energy_joules_total[{FULL}])) "
                                            f">= {FULL_SAMPLES}"),
                   2 * DEADLINE_SECONDS, 0.5, "a whole window of the demo's energy counters in Prometheus")
        yield demo, prometheus, printed
    finally:
        prometheus.stop()
        demo.stop()


def _rate_bounds(prometheus, family: str, by: str, start: float, end: float):
    """{value of `by`: (lowest, highest)} that a `top` query evaluated between `start` and `end` can read.

    Prometheus's own rate of each series over the window, every RATE_STEP_SECONDS, from either job (top
    counts each series once, from whichever job it meets first), summed over the series of each value of
    `by`. Between two of those readings a scrape can enter the window a moment before another leaves it:
    each series' range is widened by the rate of its largest step between two scrapes."""
    step = max(RATE_STEP_SECONDS, (end - start) / 10000)
    query = {"query": f"rate({family}[{WINDOW}])", "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
    answer = get_json(f"{prometheus.url}/api/v1/query_range?" + urllib.parse.urlencode(query))
    per_series = defaultdict(lambda: [float("inf"), float("-inf"), 0.0])  # lowest, highest, largest step
    for result in answer["data"]["result"]:
        found = per_series[_series(result["metric"])]
        values = [float(value) for _, value in result["values"]]
        found[0], found[1] = min(found[0], *values), max(found[1], *values)
    for result in prometheus.query(f"{family}[{FULL}] @ {end:.3f}"):
        found = per_series[_series(result["metric"])]
        values = [float(value) for _, value in result["values"]]
        found[2] = max([found[2]] + [b - a for a, b in zip(values, values[1:])])
    bounds = defaultdict(lambda: [0.0, 0.0])
    for labels, (low, high, largest_step) in per_series.items():
        bound, slack = bounds[dict(labels).get(by)], EXTRAPOLATED * largest_step / WINDOW_SECONDS
        bound[0] += low - slack
        bound[1] += high + slack
    return dict(bounds)


def _series(metric: dict) -> tuple:
    """A series as top keys it: without the labels of the job that scraped it."""
    return tuple(sorted((k, v) for k, v in metric.items() if k not in ("__name__", "job", "instance")))


def test_the_table_matches_the_demos_own_series(stack):
    demo, prometheus, _ = stack
    before = served(demo.url())
    asked_from = time.time()
    document = top_json(["--prometheus", prometheus.url, "--window", WINDOW])
    asked_until = time.time()
    after = served(demo.url())
    rows = rows_by_pod(document)
    assert set(rows) == {"trainer-0", "llm-server-a", "llm-server-b"}
    trainer, a, b = rows["trainer-0"], rows["llm-server-a"], rows["llm-server-b"]
    assert (trainer["gpus"], a["gpus"], b["gpus"]) == (2, 0.5, 0.25)
    assert (trainer["node"], trainer["health"], b["health"]) == ("demo-node", "unhealthy", "healthy")
    assert (trainer["cluster_queue"], trainer["local_queue"], b["local_queue"]) == ("cq-research", "team-ml", None)
    for pod, row in rows.items():  # the last scrape, read between the demo's own two answers (rounded to 0.01)
        readings = [own_sum(own, "pod_gpu_container_sm_utilization_ratio", pod) for own in (before, after)]
        assert within_readings(row["sm_ratio"], readings, 0.03), (pod, row["sm_ratio"], readings)
    # Power: within what Prometheus itself read of the same series over the same window around top's query.
    power = _rate_bounds(prometheus, "pod_gpu_container_energy_joules_total", "pod", asked_from, asked_until)
    for pod, row in rows.items():
        low, high = power[pod]
        assert low <= row["power_watts"] <= high, (pod, row["power_watts"], power)
    assert power["trainer-0"][0] > 0  # the window holds the trainer's energy: the check above is no 0 <= 0
    assert b["idle_ratio"] > 0.5 and trainer["idle_ratio"] == 0.0
    no_holder, = [u for u in document["unattributed"] if u["reason"] == "no_holder"]
    unattributed = _rate_bounds(prometheus, "pod_gpu_unattributed_energy_joules_total", "reason", asked_from,
                                asked_until)
    assert unattributed["no_holder"][0] <= no_holder["power_watts"] <= unattributed["no_holder"][1], unattributed


def test_the_url_may_come_from_the_environment_and_rows_group_by_queue(stack):
    _, prometheus, _ = stack
    run = run_top(["--window", WINDOW, "--by", "queue"], env={"POD_GPU_EXPORTER_PROMETHEUS_URL": prometheus.url})
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split()[:4] == ["CLUSTER-QUEUE", "NAMESPACE", "LOCAL-QUEUE", "CONTAINERS"]
    assert lines[1].split()[:5] == ["cq-research", "ml-team", "team-ml", "1", "2"], run.stdout


def test_an_unreachable_prometheus_is_one_line():
    run = run_top(["--prometheus", f"http://127.0.0.1:{free_port()}"])
    assert run.returncode == 1 and run.stdout == "" and len(run.stderr.splitlines()) == 1, run.stderr
    assert "cannot be reached" in run.stderr


def test_a_prometheus_without_the_exporters_series_is_one_line(tmp_path_factory):
    prometheus = _prometheus(tmp_path_factory, [])
    try:
        run = run_top(["--prometheus", prometheus.url])
    finally:
        prometheus.stop()
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
    assert "has no pod_gpu_exporter_dcgm_up series" in run.stderr


def test_the_top_command_the_demo_prints_works(stack):
    _, prometheus, printed = stack
    line = wait_until(lambda: next((l for l in list(printed) if " top --prometheus " in l), None), 10, 0.1,
                      "the demo's line naming top")
    # It names the Prometheus prometheus/demo/prometheus.yml starts; this test's listens elsewhere.
    command = shlex.split(line.replace(PROMETHEUS_URL, prometheus.url)) + ["--window", WINDOW]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=str(REPO_ROOT), env=exporter_env())
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1].split()[:5] == ["ml-team", "trainer-0", "pytorch", "demo-node", "2"], run.stdout


def test_basic_auth_as_prometheus_asks_for_it(tmp_path_factory, tmp_path):
    import bcrypt

    binary = shutil.which("prometheus") or pytest.skip("prometheus is not installed")
    users = {"basic_auth_users": {"viewer": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()}}
    prometheus = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus-auth"), {"scrape_configs": []},
                                  web_config=users, credentials=("viewer", "s3cret"))
    (tmp_path / "password").write_text("s3cret\n")
    (tmp_path / "wrong").write_text("guess\n")
    try:
        asked = run_top(["--prometheus", prometheus.url, "--prometheus.user", "viewer",
                         "--prometheus.password-file", str(tmp_path / "password")])
        refused = run_top(["--prometheus", prometheus.url, "--prometheus.user", "viewer",
                           "--prometheus.password-file", str(tmp_path / "wrong")])
        from_env = run_top(["--prometheus", prometheus.url.replace("http://", "http://viewer@")],
                           env={"POD_GPU_EXPORTER_PROMETHEUS_PASSWORD": "s3cret"})
    finally:
        prometheus.stop()
    # Let in, it finds no exporter (it scrapes nothing): the query was answered.
    assert asked.returncode == 1 and "has no pod_gpu_exporter_dcgm_up series" in asked.stderr, asked.stderr
    assert refused.returncode == 1 and "answered HTTP 401" in refused.stderr, refused.stderr
    assert len(refused.stderr.splitlines()) == 1
    # What was asked, what the server said, and what to give it (docs/top.md's line).
    assert "answered HTTP 401 Unauthorized to the query pod_gpu_exporter_dcgm_up: Unauthorized (give " \
           "--prometheus.user" in refused.stderr, refused.stderr
    assert from_env.returncode == 1 and "answered HTTP 401" not in from_env.stderr, from_env.stderr
