"""base/logs.LogOnce: each event logged once, again only after it is forgotten, from any number of threads."""

from __future__ import annotations

import threading

from exporter.base.logs import LogOnce


def test_an_event_is_logged_once_until_it_is_forgotten(log_stream):
    once = LogOnce()
    assert once.log("refused", "warn", "the kubelet refused", error="x")
    assert not once.log("refused", "warn", "the kubelet refused", error="y")
    assert once.forget("refused") and not once.forget("refused")
    assert once.log("refused", "warn", "the kubelet refused", error="z")
    assert [line.rsplit(" ", 1)[-1] for line in log_stream.getvalue().splitlines()] == ["error=x", "error=z"]


def test_retain_forgets_the_events_that_ended():
    once = LogOnce()
    assert [key for key in ("a", "b", "c") if once.first(key)] == ["a", "b", "c"]
    once.retain({"b"})
    assert [key for key in ("a", "b", "c") if once.first(key)] == ["a", "c"]


def test_a_key_is_logged_by_exactly_one_of_many_threads():
    once, firsts = LogOnce(), []
    start = threading.Barrier(8)

    def race():
        start.wait()
        firsts.append(once.first("event"))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(firsts) == [False] * 7 + [True]


def test_log_once_with_a_bound_logs_no_new_key_past_it():
    once = LogOnce(most=2)
    assert once.first("a") and once.first("b")
    assert not once.first("c") and not once.first("a")
