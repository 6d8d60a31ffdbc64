"""Whether the pod store can be trusted: while the pod watch is up, and for a grace period after it last was."""

from __future__ import annotations

import time
from typing import Callable, Optional


class Freshness:
    """True while `healthy()`, and for `grace_seconds` after it last was: a reconnect must not turn every
    series into a new one. Never before the first healthy moment: without a synced watch nothing is known."""

    def __init__(self, healthy: Callable[[], bool], grace_seconds: float, clock: Callable[[], float] = time.monotonic):
        self._healthy = healthy
        self._grace = grace_seconds
        self._clock = clock
        self._healthy_until: Optional[float] = None  # one float swapped whole: safe for the threads that ask

    def __call__(self) -> bool:
        now = self._clock()
        if self._healthy():
            self._healthy_until = now + self._grace
            return True
        until = self._healthy_until
        return until is not None and now < until
