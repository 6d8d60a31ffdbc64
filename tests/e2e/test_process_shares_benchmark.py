"""benchmarks/process_shares.py keeps working: a short run prints every figure (timings are not judged)."""

from __future__ import annotations

import subprocess
import sys

from support.exporter_process import REPO_ROOT


def test_process_shares_benchmark_runs_and_prints_every_figure():
    # The baseline is this same checkout's HEAD: the child-process path runs, whatever HEAD is.
    run = subprocess.run([sys.executable, "benchmarks/process_shares.py", "--iterations", "5", "--rounds", "1",
                          "--baseline", "HEAD"], cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    for label in ("series served: 32 memory, 32 SM, 8 unattributed gauges, 16 unattributed memory, 32 energy, 32 idle",
                  "NVML calls per refresh:", "whole refresh (NVML + /proc + shares + energy)",
                  "the same without the energy reads", "energy's cost: x", "the refresh of HEAD",
                  "this code against HEAD: x", "NVML reading", "/proc/<pid>/cgroup of 50 PIDs",
                  "shares computed and rendered", "real /proc: cgroup of"):
        assert label in run.stdout, f"{label!r} missing from:\n{run.stdout}"
