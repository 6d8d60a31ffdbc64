"""The retrying bounded cache: answers kept, failures retried after the interval, one bound for both."""

from __future__ import annotations

import pytest

from exporter.base.cache import RetryingCache
from support.clocks import ManualClock


class Lookup:
    """A lookup that answers the keys in `answers` and fails (None) for the rest, counting its calls."""

    def __init__(self, answers=None):
        self.answers = dict(answers or {})
        self.asked = []

    def __call__(self, key):
        self.asked.append(key)
        return self.answers.get(key)


def test_an_answer_is_looked_up_once_and_kept():
    lookup = Lookup({"a": 1})
    cache = RetryingCache(lookup, retry_after_seconds=60)
    assert [cache.get("a") for _ in range(5)] == [1] * 5
    assert lookup.asked == ["a"] and cache.lookups == 1


def test_a_falsy_answer_is_an_answer_not_a_failure():
    lookup = Lookup({"claim": frozenset()})  # a claim without adminAccess devices
    cache = RetryingCache(lookup, retry_after_seconds=60)
    assert cache.get("claim") == frozenset() and cache.get("claim") == frozenset()
    assert cache.lookups == 1 and not cache.failed_before("claim")


def test_a_failure_is_remembered_then_retried_after_the_interval():
    clock, lookup = ManualClock(), Lookup()
    cache = RetryingCache(lookup, retry_after_seconds=60, clock=clock)
    assert not cache.failed_before("a")
    assert cache.get("a") is None and cache.failed_before("a")
    clock.now += 59
    assert cache.get("a") is None and lookup.asked == ["a"]  # not asked again yet
    lookup.answers["a"] = 7  # the answer turns up later
    clock.now += 1
    assert cache.get("a") == 7 and lookup.asked == ["a", "a"]
    assert not cache.failed_before("a") and cache.lookups == 2


def test_a_retry_that_fails_again_waits_a_whole_interval_more():
    clock, lookup = ManualClock(), Lookup()
    cache = RetryingCache(lookup, retry_after_seconds=60, clock=clock)
    cache.get("a")
    clock.now += 60
    cache.get("a")  # retried, fails again at t=160
    clock.now += 59
    cache.get("a")
    assert cache.lookups == 2


def test_failures_count_towards_the_bound_and_the_oldest_goes_first():
    clock, lookup = ManualClock(), Lookup({"answered": "x"})
    cache = RetryingCache(lookup, retry_after_seconds=60, max_entries=3, clock=clock)
    cache.get("answered")
    for key in range(100):  # e.g. a Job a minute that the API server will not describe
        cache.get(key)
        assert len(cache) <= 3
    assert len(cache) == 3
    assert not cache.failed_before(0) and cache.failed_before(99)  # the oldest made room
    cache.get("answered")
    assert lookup.asked.count("answered") == 2  # evicted, so asked again: never more than a miss


def test_an_entry_stored_again_becomes_the_youngest():
    clock, lookup = ManualClock(), Lookup()
    cache = RetryingCache(lookup, retry_after_seconds=1, max_entries=2, clock=clock)
    cache.get("a")
    cache.get("b")
    clock.now += 1
    cache.get("a")  # retried: now younger than "b"
    cache.get("c")
    assert cache.failed_before("a") and not cache.failed_before("b") and cache.failed_before("c")


def test_retain_forgets_every_other_key_answers_and_failures():
    lookup = Lookup({"a": 1, "b": 2})
    cache = RetryingCache(lookup, retry_after_seconds=60)
    for key in ("a", "b", "c", "d"):
        cache.get(key)
    cache.retain({"b", "d", "never-cached"})
    assert len(cache) == 2 and cache.failed_before("d") and not cache.failed_before("c")
    cache.get("a")
    cache.get("b")
    assert lookup.asked.count("a") == 2 and lookup.asked.count("b") == 1


def test_the_lookup_may_ask_whether_its_key_failed_before():
    seen = []
    cache = None

    def lookup(key):
        seen.append(cache.failed_before(key))  # the cache's lock is not held while a lookup runs
        return None

    clock = ManualClock()
    cache = RetryingCache(lookup, retry_after_seconds=1, clock=clock)
    cache.get("a")
    clock.now += 1
    cache.get("a")
    assert seen == [False, True]


def test_a_bound_below_one_is_refused():
    with pytest.raises(ValueError):
        RetryingCache(Lookup(), retry_after_seconds=1, max_entries=0)
