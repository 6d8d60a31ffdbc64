"""BoundedRunner: a call into an uninterruptible library waited for at most a bound, one stuck thread at most."""

from __future__ import annotations

import threading

import pytest

from exporter.base.bounded import BoundedRunner, CallTimeout, timeouts_total


def test_the_answer_and_the_error_of_a_call_come_back():
    runner = BoundedRunner("test-call", 30, "a test call")
    assert runner.run(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(KeyError):
        runner.run({}.__getitem__, "missing")
    assert runner.timeouts == 0 and not runner.busy


def test_a_hung_call_times_out_and_later_calls_fail_at_once_until_it_returns(log_stream):
    release, calls = threading.Event(), []
    runner = BoundedRunner("test-call", 0.05, "a test call")
    before = timeouts_total()

    def hangs():
        calls.append("hangs")
        release.wait(30)
        return "late"

    with pytest.raises(CallTimeout):
        runner.run(hangs)
    assert runner.busy
    with pytest.raises(CallTimeout, match="still not returned"):
        runner.run(calls.append, "never started")  # refused: no second thread behind the stuck one
    assert calls == ["hangs"] and runner.timeouts == 2 and timeouts_total() - before == 2
    release.set()
    done = threading.Event()
    threading.Thread(target=lambda: (runner._stuck.join(10), done.set()), daemon=True).start()
    assert done.wait(10)
    assert runner.run(lambda: "again") == "again" and not runner.busy
    log = log_stream.getvalue()
    assert log.count("level=warn") == 1 and log.count("did not return in time") == 2  # warn once, then debug
