"""How often one watched resource may ask the API server: a hard request budget and a resettable backoff."""

from __future__ import annotations

import random
import threading
import time
from typing import Callable

# Every list and every watch request of one resource takes a token: two at once (a list and the watch
# from its version), then one per REQUEST_INTERVAL_SECONDS. Whatever the server does (watches that end
# at once, a 410 on every watch, errors) one resource makes at most 2 + 60/2.5 = 26 requests a minute,
# so pods, ResourceSlices and DeviceTaintRules together stay under 80 a minute. A list of more than
# LIST_PAGE_SIZE objects takes one request per page; its pages share the list's token.
REQUEST_BURST = 2
REQUEST_INTERVAL_SECONDS = 2.5
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0


class RequestBudget:
    """A token bucket: `take` waits for a token (or until `stop` is set, then returns False)."""

    def __init__(self, burst: int = REQUEST_BURST, interval: float = REQUEST_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._burst = burst
        self._interval = interval
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self.taken = 0

    def take(self, stop: threading.Event) -> bool:
        while True:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._updated) / self._interval)
            self._updated = now
            if self._tokens >= 1:
                self._tokens -= 1
                self.taken += 1
                return True
            if stop.wait((1 - self._tokens) * self._interval):
                return False


class Backoff:
    """The pause after a failure: doubles up to BACKOFF_MAX_SECONDS, jittered; `reset` after a success,
    so that one cut watch after a long outage is retried at once, not after the outage's last pause."""

    def __init__(self, first: float = BACKOFF_FIRST_SECONDS, most: float = BACKOFF_MAX_SECONDS):
        self._first = first
        self._most = most
        self._next = first

    def next_pause(self) -> float:
        pause = self._next * random.uniform(0.8, 1.2)
        self._next = min(self._next * 2, self._most)
        return pause

    def reset(self) -> None:
        self._next = self._first

    @property
    def pending(self) -> float:
        """The next pause before jitter, for tests and debugging."""
        return self._next
