"""`top --prometheus`: a real Prometheus scraping the demo, the table checked against the demo's own series."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from support.prometheus_server import DEADLINE_SECONDS, PrometheusServer, free_port
from support.exporter_process import REPO_ROOT, exporter_env
from support.top_runs import (own_sum, rows_by_pod, run_top, served, start_demo_keeping_its_text, top_json,
                              within_readings)
from support.waiting import wait_until

WINDOW = "20s"
WINDOW_SECONDS = 20.0
# rate() over a window of 1 s scrapes of counters that step every 2 s (the demo's refresh), extrapolated
# to the window's edges: right within those steps of the window.
ROUNDING = (2.0 + 1.0) / WINDOW_SECONDS + 0.05
TRAINER_WATTS = (16.365 + 55 * 0.85) + (16.365 + 55 * 0.8)  # exporter.demo.workload.gpu_energy_mj, GPUs 0 and 1
GPU2_WATTS = 16.365 + 55 * 0.45
IDLE_GPU_WATTS = 16.365  # GPU 3, held by nobody: reason no_holder


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
        # A whole window of scrapes with the energy counters in them.
        wait_until(lambda: prometheus.query(f"count_over_time(pod_gpu_container_energy_joules_total[{WINDOW}]) > 15"),
                   DEADLINE_SECONDS, 0.5, "a window of the demo's energy counters in Prometheus")
        yield demo, prometheus, printed
    finally:
        prometheus.stop()
        demo.stop()


def test_the_table_matches_the_demos_own_series(stack):
    demo, prometheus, _ = stack
    before = served(demo.url())
    document = top_json(["--prometheus", prometheus.url, "--window", WINDOW])
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
    assert trainer["power_watts"] == pytest.approx(TRAINER_WATTS, rel=ROUNDING)
    assert a["power_watts"] + b["power_watts"] == pytest.approx(GPU2_WATTS, rel=ROUNDING)
    assert b["idle_ratio"] > 0.5 and trainer["idle_ratio"] == 0.0
    no_holder, = [u for u in document["unattributed"] if u["reason"] == "no_holder"]
    assert no_holder["power_watts"] == pytest.approx(IDLE_GPU_WATTS, rel=ROUNDING)
    notebook, = document["unallocated"]
    assert (notebook["namespace"], notebook["pod"], notebook["container"]) == ("research", "notebook-7", "jupyter")


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
    line = wait_until(lambda: next((l for l in list(printed) if " top --prometheus PROMETHEUS_URL" in l), None), 10, 0.1,
                      "the demo's line naming top")
    command = shlex.split(line.split(": ", 1)[1].replace("PROMETHEUS_URL", prometheus.url)) + ["--window", WINDOW]
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
    assert from_env.returncode == 1 and "answered HTTP 401" not in from_env.stderr, from_env.stderr
