"""benchmarks/load.py keeps working: a short run prints every figure and finds no error (timings not judged)."""

from __future__ import annotations

import subprocess
import sys

from support.exporter_process import REPO_ROOT

FIGURES = ("scrapes:", "errors:             0", "latency:", "p50", "p99", "exporter RSS:", "before", "after",
           "peak (VmHWM)", "RSS over the run:", "kubelet List calls:", "exporter CPU:")


def test_short_load_run_prints_every_figure():
    run = subprocess.run([sys.executable, "benchmarks/load.py", "--duration", "4", "--concurrency", "4"],
                         cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    missing = [figure for figure in FIGURES if figure not in run.stdout]
    assert not missing, f"missing from the output: {missing}\n{run.stdout}"
