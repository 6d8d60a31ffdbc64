"""benchmarks/process_shares.py keeps working: a short run prints every figure (timings are not judged)."""

from __future__ import annotations

import subprocess
import sys

from support.exporter_process import REPO_ROOT


def test_process_shares_benchmark_runs_and_prints_every_figure():
    run = subprocess.run([sys.executable, "benchmarks/process_shares.py", "--iterations", "5"], cwd=str(REPO_ROOT),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    for label in ("series served: 32 memory, 32 SM, 8 unattributed gauges", "NVML calls per refresh:",
                  "whole refresh (NVML + /proc + shares)", "NVML reading", "/proc/<pid>/cgroup of 50 PIDs",
                  "shares computed and rendered", "real /proc: cgroup of"):
        assert label in run.stdout, f"{label!r} missing from:\n{run.stdout}"
