"""Stopping a child process a test started (the exporter, Prometheus, VictoriaMetrics): ask it to go, give it
time to finish as it would in production, and kill it only if it will not, so no test leaves one behind."""

from __future__ import annotations

import signal
import subprocess

STOP_SECONDS = 10.0


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_seconds: float = STOP_SECONDS) -> int:
    """Send `sig` to a process still running, wait up to `timeout_seconds`, then kill it; its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
