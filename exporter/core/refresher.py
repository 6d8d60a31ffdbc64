"""A background loop on its own daemon thread: refresh now, then every interval, until stopped."""

from __future__ import annotations

import threading
from typing import Callable, Optional

from exporter.base.logs import log


class Refresher:
    """Calls `refresh` at once and then every `interval_seconds` on a thread called `name`.

    An unexpected exception is logged (one error line naming `what` is refreshed) and the loop goes
    on: a bug must not end a refresher for good, as it once did. `stop` ends the loop at once, even
    mid-wait; `wake` makes the next refresh come at once rather than at the end of the interval.
    """

    def __init__(self, name: str, refresh: Callable[[], object], interval_seconds: float, what: str):
        self._name = name
        self._refresh = refresh
        self._interval = interval_seconds
        self._what = what
        self._stop = threading.Event()
        self._woken = threading.Event()  # set by wake and by stop: the wait between refreshes ends
        self._first_done = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def stopping(self) -> bool:
        """Whether `stop` was called: a refresh failing now may be cut short by the shutdown."""
        return self._stop.is_set()

    def start(self, before_first: Optional[Callable[[], object]] = None) -> None:
        """Start the thread and return at once; `before_first` runs on the thread before the first
        refresh (waiting for an optional source off the main thread). `wait_first` waits for that refresh."""
        self._thread = threading.Thread(target=self._run, args=(self._first_done, before_first), name=self._name,
                                        daemon=True)
        self._thread.start()

    def wait_first(self, timeout_seconds: float) -> bool:
        """Wait up to `timeout_seconds` for the first refresh to be done; whether it is."""
        return self._first_done.wait(timeout_seconds)

    def wake(self) -> None:
        """Refresh now (after a refresh in progress, if any) instead of at the end of the interval."""
        self._woken.set()

    def stop(self, timeout_seconds: float = 2.0) -> None:
        """End the loop and wait up to `timeout_seconds` for a refresh in progress to return."""
        self._stop.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    def _run(self, first_done: threading.Event, before_first: Optional[Callable[[], object]]) -> None:
        try:
            if before_first is not None:
                self._call_logged(before_first)
            self._refresh_once()
        finally:
            first_done.set()
        while True:
            self._woken.wait(self._interval)
            self._woken.clear()
            if self._stop.is_set():
                break
            self._refresh_once()

    def _refresh_once(self) -> None:
        self._call_logged(self._refresh)

    def _call_logged(self, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 - a bug: logged with its trace, and the next interval tries again
            log("error", f"unexpected error refreshing {self._what}", exc_info=True)
