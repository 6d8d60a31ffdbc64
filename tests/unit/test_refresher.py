"""The background refresh loop: now and every interval, a bug logged and survived, stopped promptly."""

from __future__ import annotations

import threading
import time

from exporter.core.refresher import Refresher
from support.waiting import holds_throughout, wait_until


class Work:
    """A refresh that counts its calls, can fail like a bug, and can hang until released."""

    def __init__(self):
        self.calls = 0
        self.fail = False
        self.release = threading.Event()
        self.release.set()
        self.thread_names = []

    def __call__(self):
        self.calls += 1
        self.thread_names.append(threading.current_thread().name)
        self.release.wait(10)
        if self.fail:
            raise RuntimeError("a bug")


def test_refreshes_now_then_every_interval_on_its_named_thread():
    work = Work()
    refresher = Refresher("test-refresher", work, interval_seconds=0.02, what="the test")
    refresher.start()
    try:
        wait_until(lambda: work.calls >= 3)
    finally:
        refresher.stop()
    calls = work.calls
    holds_throughout(lambda: work.calls == calls, 0.1, describe="no call after stop()")  # stopped for good
    assert set(work.thread_names) == {"test-refresher"}


def test_a_bug_is_logged_once_per_failure_and_the_loop_goes_on(log_stream):
    work = Work()
    work.fail = True
    refresher = Refresher("test-refresher", work, interval_seconds=0.02, what="the test")
    refresher.start()
    try:
        assert refresher.wait_first(10)  # a failing first refresh is done all the same, and the loop goes on
        wait_until(lambda: work.calls >= 3)
    finally:
        refresher.stop()
    lines = [line for line in log_stream.getvalue().splitlines() if "unexpected error refreshing the test" in line]
    assert len(lines) == work.calls and all("level=error" in line and "a bug" in line for line in lines)


def test_stop_ends_the_wait_between_refreshes_at_once():
    work = Work()
    refresher = Refresher("test-refresher", work, interval_seconds=3600, what="the test")
    refresher.start()
    assert refresher.wait_first(10)
    started = time.monotonic()
    refresher.stop(timeout_seconds=5)
    assert time.monotonic() - started < 1 and work.calls == 1
    assert refresher.stopping


def test_waiting_for_the_first_refresh_ends_at_its_bound_while_it_hangs():
    work = Work()
    work.release.clear()  # the first refresh hangs, like a kubelet that never answers
    refresher = Refresher("test-refresher", work, interval_seconds=3600, what="the test")
    refresher.start()
    wait_until(lambda: work.calls == 1)
    started = time.monotonic()
    assert not refresher.wait_first(0.1)
    assert time.monotonic() - started < 5 and work.calls == 1
    work.release.set()
    refresher.stop()


def test_waiting_for_the_first_refresh_returns_once_it_is_done():
    work = Work()
    refresher = Refresher("test-refresher", work, interval_seconds=3600, what="the test")
    refresher.start()
    try:
        assert refresher.wait_first(10) and work.calls == 1
    finally:
        refresher.stop()


def test_without_waiting_start_returns_while_the_first_refresh_hangs():
    work = Work()
    work.release.clear()
    refresher = Refresher("test-refresher", work, interval_seconds=3600, what="the test")
    started = time.monotonic()
    refresher.start()
    assert time.monotonic() - started < 1
    wait_until(lambda: work.calls == 1)
    work.release.set()
    refresher.stop()
