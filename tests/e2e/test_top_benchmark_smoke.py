"""The pod proxy path on a 1,000-node fake cluster stays within its bounds: scrapes in flight, time, every silent node named."""

from __future__ import annotations

import subprocess
import sys

from support.exporter_process import REPO_ROOT


def test_a_thousand_node_scrape_through_the_proxy_is_bounded():
    run = subprocess.run([sys.executable, "benchmarks/top_proxy.py", "--nodes", "1000", "--stalled", "20"],
                         cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    for figure in ("wall time:", "proxied requests: 2000", "most in flight:", "rows: 2940, nodes not answering: 20",
                   "peak RSS of top:", "bound concurrency: held", "bound every stalled node named: held"):
        assert figure in run.stdout, run.stdout
