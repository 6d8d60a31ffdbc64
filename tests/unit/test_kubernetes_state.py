"""The Kubernetes source's state, in-process without a server: one watch's health, the pod store a watch keeps,
and the log-once bounds they rely on."""

from __future__ import annotations

import json
import time

import pytest

from exporter.collectors.kubernetes.labels import LabelSpec
from exporter.collectors.kubernetes.pod_store import PodStore
from exporter.collectors.kubernetes.status import frozen_counts
from exporter.collectors.kubernetes.stream import decode_object
from exporter.collectors.kubernetes.watch_health import WATCH_CONFIRM_SECONDS, Stage, WatchHealth
from support.clocks import ManualClock
from support.waiting import wait_until
from support.fake_kube_api import make_pod
from support.kube_scenario import NODE


class Recovered:
    """Counts the moves into UP (the watch reports the API answering again on each)."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1


def health():
    clock, recovered = ManualClock(), Recovered()
    return WatchHealth(recovered, clock), clock, recovered


def test_a_watch_is_up_from_its_first_list_and_down_from_any_failure():
    watch, _, recovered = health()
    assert not watch.healthy and watch.state.stage is Stage.STARTING
    watch.listed()
    assert watch.healthy and recovered.calls == 1
    watch.failed("list")
    assert not watch.healthy and watch.state.failed_verb == "list"
    watch.listed()  # after a failed list, the next list is enough
    assert watch.healthy and watch.state.stage is Stage.UP


def test_after_a_failed_watch_the_new_one_proves_itself_by_staying_open():
    watch, clock, recovered = health()
    watch.listed()
    watch.failed("watch")
    watch.listed()
    assert not watch.healthy and watch.state.stage is Stage.PROVING  # listed, but is the watch allowed now?
    watch.watch_opened()
    clock.now += WATCH_CONFIRM_SECONDS / 2
    watch.watch_opened()  # a watch reopened meanwhile: the clock runs from the first since the list
    assert not watch.healthy
    clock.now += WATCH_CONFIRM_SECONDS / 2
    calls = recovered.calls
    assert watch.healthy and watch.state.stage is Stage.UP  # the reader saw it proven, and moved it on
    assert watch.healthy and recovered.calls == calls + 1  # reported once


def test_a_watch_that_stays_open_is_reported_recovered_without_any_reader():
    # The ResourceSlice watch is read by /metrics only: its recovery is logged when proven, not at a later read.
    recovered = Recovered()
    watch = WatchHealth(recovered)  # the real clock, as the timer that proves it runs on real time
    watch.listed()
    watch.failed("watch")
    watch.listed()
    watch.watch_opened()
    wait_until(lambda: recovered.calls == 2, timeout_seconds=10, describe="the recovery reported by the proof timer")
    assert watch.state.stage is Stage.UP


def test_the_proof_without_a_reader_follows_the_clock_given_not_the_wall():
    watch, clock, recovered = health()
    watch.listed()
    watch.failed("watch")
    watch.listed()
    watch.watch_opened()
    time.sleep(WATCH_CONFIRM_SECONDS * 1.5)  # real time passing while the clock stands still is the point
    assert watch.state.stage is Stage.PROVING and recovered.calls == 1  # open a while on the wall: not proven
    clock.now += WATCH_CONFIRM_SECONDS  # open long enough by the clock: proven with nobody reading
    wait_until(lambda: recovered.calls == 2, timeout_seconds=10, describe="the recovery reported by the proof")
    assert watch.state.stage is Stage.UP


def test_after_a_dropped_watch_only_an_event_proves_the_next():
    watch, clock, recovered = health()
    watch.listed()
    watch.failed("watch", dropped=True)  # it fell silent: staying open proves nothing
    watch.listed()
    watch.watch_opened()
    clock.now += 100 * WATCH_CONFIRM_SECONDS
    assert not watch.healthy
    watch.line_arrived()
    assert watch.healthy and not watch.state.needs_event


def test_a_relist_while_proving_starts_the_proof_again():
    watch, clock, _ = health()
    watch.listed()
    watch.failed("watch")
    watch.listed()
    watch.watch_opened()
    watch.listed()  # the watch's version expired: listed again, still to be proven
    clock.now += WATCH_CONFIRM_SECONDS
    assert not watch.healthy and watch.state.opened_at is None
    watch.watch_opened()
    clock.now += WATCH_CONFIRM_SECONDS
    assert watch.healthy


def test_a_failed_list_after_a_failed_watch_needs_no_proof():
    watch, _, _ = health()
    watch.listed()
    watch.failed("watch")
    watch.failed("list")
    watch.listed()
    assert watch.healthy


def pod(name, phase="Running"):
    from lightkube.resources.core_v1 import Pod

    return decode_object(json.dumps(make_pod("ml", name, NODE, phase=phase)).encode(), Pod)


def test_the_store_follows_events_and_remembers_deleted_pods():
    store = PodStore(LabelSpec(), NODE)
    store.replace([pod("a"), pod("done", "Succeeded")], complete=True)
    store.add(pod("b"))
    store.delete(pod("a"))
    assert store.get(("ml", "a")) is None and len(store) == 2
    assert store.ended_among([("ml", "a"), ("ml", "b"), ("ml", "done")]) == {("ml", "a"), ("ml", "done")}
    store.add(pod("a"))  # the same name again: a new pod
    assert store.ended_among([("ml", "a")]) == set()


def test_a_pod_missing_from_a_list_has_ended_only_when_the_list_is_complete():
    store = PodStore(LabelSpec(), NODE)
    store.replace([pod("a"), pod("b")], complete=True)
    store.replace([pod("a")], complete=False)  # "b" may only have been unreadable
    assert store.get(("ml", "b")) is None and store.ended_among([("ml", "b")]) == set()
    store.replace([pod("a"), pod("b")], complete=True)
    store.replace([pod("b")], complete=True)
    assert store.ended_among([("ml", "a"), ("ml", "b")]) == {("ml", "a")}
    assert set(store.copy()) == {("ml", "b")}


def test_a_status_snapshot_does_not_follow_the_counts():
    counts = {"malformed": 1}
    snapshot = frozen_counts(counts)
    counts["malformed"] += 1
    assert snapshot["malformed"] == 1
    with pytest.raises(TypeError):
        snapshot["malformed"] = 3  # type: ignore[index]

