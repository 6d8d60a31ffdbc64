"""The benchmark keeps working: a quick run at a small size prints every figure (timings are not judged)."""

from __future__ import annotations

import subprocess
import sys

from exporter_process import REPO_ROOT

LABELS = (
    "== large:", "== typical:", "== large gzip:", "== in-process",
    "attributed series:",
    "unchanged body (cached)", "changing body", "bare relay (the floor)", "relay p50",
    "direct p50", "exporter p50", "p99", "p50 ratio", "exporter CPU", "ms/scrape",
    "exporter peak RSS (VmHWM):",
    "prometheus_client parse+render:", "rewrite, new values (same series):",
    "rewrite, first sight (nothing cached):", "faster than parse+render",
)


def test_small_benchmark_runs_and_prints_every_figure():
    run = subprocess.run([sys.executable, "benchmarks/perf.py", "--size", "small"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    missing = [label for label in LABELS if label not in run.stdout]
    assert not missing, f"figures missing from the output: {missing}\n{run.stdout}"
    # Three scenarios, each with both variants and a peak RSS; the relay beside the two plain ones.
    assert run.stdout.count("p50 ratio") == 8 and run.stdout.count("peak RSS") == 3, run.stdout


def test_process_shares_benchmark_runs_and_prints_every_figure():
    run = subprocess.run([sys.executable, "benchmarks/process_shares.py", "--iterations", "5"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    for label in ("series served: 32 memory, 32 SM, 8 unattributed gauges", "NVML calls per refresh:",
                  "whole refresh (NVML + /proc + shares)", "NVML reading", "/proc/<pid>/cgroup of 50 PIDs",
                  "shares computed and rendered", "real /proc: cgroup of"):
        assert label in run.stdout, f"{label!r} missing from:\n{run.stdout}"
