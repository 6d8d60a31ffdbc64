"""Calls into libraries that cannot be interrupted (NVML), run on a thread of their own and waited for at most a bound."""

from __future__ import annotations

import threading
from typing import Callable, Optional, TypeVar

from exporter.base.logs import log

T = TypeVar("T")


_all_lock = threading.Lock()
_all_timeouts = 0  # of every runner in the process: /metrics shows it (pod_gpu_exporter_nvml_timeouts_total)


def timeouts_total() -> int:
    """Calls of every BoundedRunner in this process that ran past their bound (or were refused meanwhile)."""
    with _all_lock:
        return _all_timeouts


class CallTimeout(Exception):
    """The call did not return within its bound (or an earlier one of the same runner still has not)."""


class BoundedRunner:
    """Runs one call at a time on a daemon thread and waits at most `timeout_seconds` for it.

    A call into a C library (nvmlInit, an NVML lookup on a wedged driver) cannot be cut short from
    Python, so a caller that must not hang waits for it only so long. The call itself goes on: while
    it has not returned, every later call fails at once instead of starting another thread, so a hung
    driver costs one stuck thread, not one per refresh. Timeouts are counted; the first is logged at
    warn, the later ones at debug (the caller's own failure reporting says the rest).
    """

    def __init__(self, name: str, timeout_seconds: float, what: str, counted: bool = True) -> None:
        self.name = name
        self._counted = counted  # in timeouts_total (pod_gpu_exporter_nvml_timeouts_total): NVML's runners only
        self.timeout_seconds = timeout_seconds
        self._what = what  # for the log line: what the stuck call was doing
        self._lock = threading.Lock()
        self._stuck: Optional[threading.Thread] = None
        self.timeouts = 0  # calls that ran past the bound, or were refused while one still had not returned

    def run(self, call: Callable[..., T], *args) -> T:
        """call(*args)'s result or exception; CallTimeout when it does not return within the bound."""
        outcome: dict = {}
        with self._lock:
            refused = self._stuck is not None and self._stuck.is_alive()
            if not refused:
                self._stuck = None
                worker = threading.Thread(target=_into, args=(outcome, call, args), name=self.name, daemon=True)
                worker.start()
        if refused:
            self._count_timeout("an earlier call has still not returned")
            raise CallTimeout(f"{self._what}: an earlier call has still not returned")
        worker.join(self.timeout_seconds)
        if worker.is_alive():
            with self._lock:
                self._stuck = worker
            self._count_timeout(f"no answer within {self.timeout_seconds:g}s")
            raise CallTimeout(f"{self._what}: no answer within {self.timeout_seconds:g}s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    @property
    def busy(self) -> bool:
        """Whether a call that ran past its bound is still running."""
        with self._lock:
            return self._stuck is not None and self._stuck.is_alive()

    def _count_timeout(self, why: str) -> None:
        global _all_timeouts
        if self._counted:
            with _all_lock:
                _all_timeouts += 1
        with self._lock:
            self.timeouts += 1
            first = self.timeouts == 1
        log("warn" if first else "debug", f"{self._what} did not return in time; carrying on without it",
            why=why, timeout_seconds=self.timeout_seconds, timeouts=self.timeouts)


def _into(outcome: dict, call: Callable, args: tuple) -> None:
    try:
        outcome["result"] = call(*args)
    except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
        outcome["error"] = exc
