"""`top --prometheus` over a window longer than the series' data, and shorter than two scrapes: a real
Prometheus scraping the demo from its start."""

from __future__ import annotations

import shutil

import pytest

from support.demo_process import start_demo
from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer
from support.top_runs import rows_by_pod, run_top, top_json
from support.waiting import wait_until

ENERGY = "pod_gpu_container_energy_joules_total"
LONG_WINDOW = "5m"  # far longer than the data Prometheus holds when the test runs (about 15 s)
COVERED = "8s"  # a window the series span from end to end: rate() is right over it


@pytest.fixture(scope="module")
def young_stack(tmp_path_factory):
    binary = shutil.which("prometheus") or pytest.skip("prometheus is not installed (apt-get install prometheus)")
    demo = start_demo()
    config = {"global": {"scrape_interval": "1s"},
              "scrape_configs": [{"job_name": "pod-gpu-metrics-exporter", "metrics_path": "/gpu/metrics",
                                  "static_configs": [{"targets": [demo.address], "labels": {"node": "demo-node"}}]}]}
    prometheus = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus-young"), config)
    try:
        wait_until(lambda: prometheus.query(f"min(count_over_time({ENERGY}[1m])) >= 12"), 2 * DEADLINE_SECONDS, 0.5,
                   "a dozen scrapes of the demo's energy counters")
        yield prometheus
    finally:
        prometheus.stop()
        demo.stop()


def _power(prometheus, window: str) -> float:
    """Prometheus's own rate() of the trainer's energy over `window`."""
    found = prometheus.query(f'sum(rate({ENERGY}{{pod="trainer-0"}}[{window}]))')
    return float(found[0]["value"][1])


def test_a_window_longer_than_the_data_reads_the_rate_of_the_data_it_has(young_stack):
    prometheus = young_stack
    covered_before, diluted = _power(prometheus, COVERED), _power(prometheus, LONG_WINDOW)
    rows = rows_by_pod(top_json(["--prometheus", prometheus.url, "--window", LONG_WINDOW]))
    covered_after = _power(prometheus, COVERED)
    trainer = rows["trainer-0"]["power_watts"]
    low, high = sorted((covered_before, covered_after))
    assert 0.75 * low <= trainer <= 1.3 * high, (trainer, covered_before, covered_after)
    # rate() over the long window divides the same increase by 5 minutes: what top showed before.
    assert diluted < 0.3 * trainer, (diluted, trainer)
    assert rows["llm-server-b"]["idle_ratio"] > 0.5  # idle time too: a share of the time spanned, not of 5 m


def test_a_window_shorter_than_two_scrapes_says_why_power_and_idle_are_dashes(young_stack):
    run = run_top(["--prometheus", young_stack.url, "--window", "500ms"])
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    header = lines[0].split()
    trainer = next(line.split() for line in lines if " trainer-0 " in line)
    assert (trainer[header.index("POWER")], trainer[header.index("IDLE")]) == ("-", "-"), run.stdout
    assert "- in POWER or IDLE of 3 rows: not enough data yet, fewer than two samples" in run.stdout, run.stdout
    widened = run_top(["--prometheus", young_stack.url, "--window", "10s"])
    assert widened.returncode == 0 and "not enough data yet" not in widened.stdout, widened.stdout
