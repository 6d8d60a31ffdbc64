"""Polling with a deadline instead of sleeping a fixed time."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(condition: Callable[[], object], timeout_seconds: float = 15.0, interval: float = 0.05):
    """Poll until condition() is truthy; return its value or fail with the last one."""
    deadline = time.monotonic() + timeout_seconds
    value = condition()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = condition()
    assert value, f"condition not met within {timeout_seconds}s"
    return value
