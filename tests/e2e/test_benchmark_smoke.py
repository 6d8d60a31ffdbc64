"""The benchmark keeps working: a quick run at a small size prints every figure (timings are not judged)."""

from __future__ import annotations

import re
import subprocess
import sys

from support.exporter_process import REPO_ROOT

LABELS = (
    "== 60 series:", "idle:", "millicores over",
    "unchanged body", "new values ", "new values, gzip",
    "exporter p50", "p99/p50", "direct p50", "exporter CPU", "ms/scrape", "rewrite in server",
    "peak RSS (VmHWM):", "a user pays at a 15 s scrape interval", "a user pays at a  1 s scrape interval",
    "== against the goals", "prometheus_client parse+render", "cheaper (goal >= 80x)",
    "CPU per series, new values:", "p99/p50 with new values (gzip):", "peak RSS:", "idle: 60:",
    "beside the compression",
)


def test_small_benchmark_runs_and_prints_every_figure():
    run = subprocess.run([sys.executable, "benchmarks/perf.py", "--size", "small"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    missing = [label for label in LABELS if label not in run.stdout]
    assert not missing, f"figures missing from the output: {missing}\n{run.stdout}"
    # One size: three variants, two of them rewriting; the summary's figures are numbers, not nan.
    assert run.stdout.count("exporter p50") == 3 and run.stdout.count("rewrite in server") == 2, run.stdout
    assert "nan" not in run.stdout, run.stdout


def test_small_benchmark_with_the_amd_body_runs_and_compares_the_two():
    run = subprocess.run([sys.executable, "benchmarks/perf.py", "--size", "small", "--amd"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    # Both bodies measured in one run (three variants each), then AMD's CPU per series against NVIDIA's,
    assert run.stdout.count("exporter p50") == 6 and "== AMD 60 series:" in run.stdout, run.stdout
    assert run.stdout.count("us per series") == 2 and run.stdout.count("per MB of upstream text") == 2, run.stdout
    # and side by side, three exporters running: the goal's figures, and AMD against an NVIDIA body padded to
    # AMD's bytes per series
    assert "side by side (2 rounds of" in run.stdout and run.stdout.count("(goal <= 1.00x)") == 2, run.stdout
    assert run.stdout.count("AMD / NVIDIA padded to AMD's bytes per series") == 2, run.stdout
    sizes = re.search(r"upstream text per series: AMD (\d+) bytes, NVIDIA (\d+), NVIDIA padded (\d+)", run.stdout)
    assert sizes and abs(int(sizes[3]) - int(sizes[1])) <= 1 < int(sizes[1]) - int(sizes[2]), run.stdout
    assert "nan" not in run.stdout, run.stdout


def test_short_soak_runs_and_prints_rss_over_time():
    run = subprocess.run([sys.executable, "benchmarks/soak.py", "--scrapes", "30", "--warmup", "10", "--report-every", "10",
                          "--foreign-mib", "0.5", "--foreign-scrapes", "2"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("== foreign body:") == 2 and run.stdout.count("dcgm_up 1") == 2, run.stdout
    assert run.stdout.count("VmRSS") >= 5 and "growth since warm-up" in run.stdout, run.stdout


KUBERNETES_LABELS = (
    "== installed size of the added packages", "total:", "== peak RSS, API off vs on",
    "API off:", "API on:", "growth:", "API requests during the", "pod node: the pod watch",
    "start-up to first list done", "churn:", "ms per update", "410 Gone -> relist",
)


def test_small_kubernetes_benchmark_runs_and_prints_every_figure():
    run = subprocess.run([sys.executable, "benchmarks/kubernetes.py", "--pods", "20", "--scrapes", "10",
                          "--large-pods", "200", "--churn-seconds", "1"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    missing = [label for label in KUBERNETES_LABELS if label not in run.stdout]
    assert not missing, f"figures missing from the output: {missing}\n{run.stdout}"
    assert "API requests during the 10 scrapes: 0" in run.stdout  # scrapes never call the API
