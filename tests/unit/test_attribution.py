"""The mapping refresher: last good kept up to a bound, scrapes never list, one failure logged once."""

from __future__ import annotations

import dataclasses
import io
import threading
import time

from exporter.base.errors import KubeletError
from exporter.base.logs import setup_logging
from exporter.core.attribution import Attribution
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.clocks import ManualClock
from support.mapping_contexts import StaticContext
from support.waiting import holds_throughout, wait_until

GPU = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


class Kubelet:
    """Stands in for PodResourcesClient.list_devices: answers, or fails like the client does."""

    def __init__(self):
        self.devices = [AllocatedDevice("ns", "p", "c", "nvidia.com/gpu", GPU)]
        self.error = None
        self.calls = 0

    def list_devices(self):
        self.calls += 1
        if self.error:
            raise self.error
        return list(self.devices)


def make(kubelet, clock, max_age=60.0):
    return Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=5, max_age_seconds=max_age, clock=clock)


def test_current_never_lists():
    kubelet, clock = Kubelet(), ManualClock()
    attribution = make(kubelet, clock)
    attribution.refresh()
    for _ in range(100):
        snapshot = attribution.current()
    assert kubelet.calls == 1
    assert snapshot.kubelet_up and snapshot.age_seconds == 0
    assert [a.owner.pod for a in snapshot.mapping.allocations] == ["p"]


def test_before_any_answer_there_is_no_mapping():
    kubelet, clock = Kubelet(), ManualClock()
    kubelet.error = KubeletError("socket missing", reason="absent")
    attribution = make(kubelet, clock)
    attribution.refresh()
    snapshot = attribution.current()
    assert not snapshot.kubelet_up and snapshot.age_seconds is None and not snapshot.mapping.owners


def test_last_good_mapping_kept_until_max_age_then_dropped():
    kubelet, clock = Kubelet(), ManualClock()
    attribution = make(kubelet, clock, max_age=60)
    attribution.refresh()
    kubelet.error = KubeletError("kubelet hangs", reason="timeout")
    clock.now += 30
    attribution.refresh()
    kept = attribution.current()
    assert not kept.kubelet_up and kept.mapping.owners and kept.age_seconds == 30
    clock.now += 31
    dropped = attribution.current()
    assert not dropped.mapping.owners and dropped.age_seconds == 61
    kubelet.error = None
    attribution.refresh()
    assert attribution.current().mapping.owners


def test_the_mapping_in_use_is_none_before_the_first_answer_and_once_it_aged_out():
    # A per-process reader given an empty mapping would take every process for one on a GPU nobody gave it.
    kubelet, clock = Kubelet(), ManualClock()
    kubelet.error = KubeletError("socket missing", reason="absent")
    attribution = make(kubelet, clock, max_age=60)
    attribution.refresh()
    assert attribution.mapping_in_use() is None
    kubelet.error = None
    attribution.refresh()
    assert attribution.mapping_in_use().owners
    kubelet.devices = []  # an answer that lists no GPU is a mapping to use: nobody holds one
    attribution.refresh()
    assert attribution.mapping_in_use() is not None and not attribution.mapping_in_use().owners
    kubelet.error = KubeletError("kubelet hangs", reason="timeout")
    clock.now += 61
    attribution.refresh()
    assert attribution.mapping_in_use() is None


def test_non_gpu_resources_are_ignored_and_nvidia_star_counted():
    kubelet, clock = Kubelet(), ManualClock()
    kubelet.devices = [
        AllocatedDevice("ns", "a", "c", "example.com/fpga", "fpga0"),
        AllocatedDevice("ns", "b", "c", "nvidia.com/gpu.shared", GPU + "::1"),
        AllocatedDevice("ns", "c", "c", "nvidia.com/mig-1g.10gb", "MIG-GPU-be839661-c0f5-7452-284b-b875666df60c/7/0"),
    ]
    attribution = make(kubelet, clock)
    attribution.refresh()
    assert sorted(a.owner.pod for a in attribution.current().mapping.allocations) == ["b", "c"]


def test_repeated_failure_is_logged_once_and_recovery_once():
    stream = io.StringIO()
    setup_logging("info", "logfmt", stream)
    kubelet, clock = Kubelet(), ManualClock()
    kubelet.error = KubeletError("kubelet socket /x not found", reason="absent")
    attribution = make(kubelet, clock)
    for _ in range(5):
        attribution.refresh()
    kubelet.error = KubeletError("rejected by rate limit", reason="rate_limited")
    attribution.refresh()
    attribution.refresh()
    kubelet.error = None
    attribution.refresh()
    attribution.refresh()
    log = stream.getvalue()
    assert log.count("reason=absent") == 1
    assert log.count("reason=rate_limited") == 1
    assert log.count("answering again") == 1
    assert attribution.list_calls == 9 and attribution.list_failures == 7


def test_background_thread_refreshes_and_stops():
    kubelet = Kubelet()
    attribution = Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=0.05, max_age_seconds=60)
    attribution.start()
    try:
        wait_until(lambda: kubelet.calls >= 3, 10, 0.01)
    finally:
        attribution.stop()
    calls = kubelet.calls
    holds_throughout(lambda: kubelet.calls == calls, 0.2, describe="no refresh after stop()")  # stopped for good


def test_a_healthy_kubelet_never_ages_out_even_with_a_refresh_interval_above_max_age():
    kubelet, clock = Kubelet(), ManualClock()
    attribution = Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=120, max_age_seconds=60, clock=clock)
    attribution.refresh()
    clock.now += 119  # just before the next refresh: the kubelet answered last time
    snapshot = attribution.current()
    assert snapshot.kubelet_up and snapshot.mapping.owners and snapshot.age_seconds == 119


class Cluster(StaticContext):
    """Here only the pods' extra labels: the same for every pod."""

    def extra_labels_for(self, pods):
        return {pod: ',team="x"' for pod in pods}


def test_each_refresh_builds_the_mapping_with_the_cluster_context():
    kubelet, clock = Kubelet(), ManualClock()
    attribution = Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=5, max_age_seconds=60, clock=clock,
                              context=Cluster())
    attribution.refresh()
    assert attribution.current().mapping.extra_labels == {("ns", "p"): ',team="x"'}


def test_the_first_list_runs_on_the_kubelet_refresher_thread_and_scrapes_wait_for_it():
    kubelet, threads = Kubelet(), []

    def list_devices():
        threads.append(threading.current_thread().name)
        return kubelet.list_devices()

    attribution = Attribution(list_devices, DEVICE_FORMS, refresh_interval_seconds=3600, max_age_seconds=60)
    attribution.start(first_wait_seconds=10)
    try:
        attribution.wait_first_refresh()  # what a scrape does before it reads the mapping
        assert threads == ["kubelet-refresher"] and attribution.current().kubelet_up
    finally:
        attribution.stop()


def test_a_scrape_waits_for_a_first_list_that_hangs_only_up_to_the_bound():
    release = threading.Event()

    def hanging_list():  # a kubelet that never answers the first List
        release.wait(10)
        return []

    attribution = Attribution(hanging_list, DEVICE_FORMS, refresh_interval_seconds=3600, max_age_seconds=60)
    started = time.monotonic()
    attribution.start(first_wait_seconds=0.1)
    try:
        attribution.wait_first_refresh()
        assert time.monotonic() - started < 5 and not attribution.current().kubelet_up
    finally:
        release.set()
        attribution.stop()


def test_an_unchanged_kubelet_answer_is_not_built_again():
    # The kubelet client hands back the very list it returned last time when the kubelet's answer
    # is unchanged; building the mapping again (MIG IDs resolved through NVML, each allocation
    # matched) would give the same mapping, so it is skipped. A changed answer is built.
    mig = "MIG-0b2c4d5e-aaaa-5bbb-8ccc-ddddeeeeffff"  # a MIG UUID: only NVML knows its GPU and instance
    answers = {"devices": [AllocatedDevice("ns", "p", "c", "nvidia.com/mig-1g.10gb", mig)]}
    resolved = []

    def resolve(device_id):  # NVML's answer for the MIG device, counted
        resolved.append(device_id)
        return GPU, "11"

    attribution = Attribution(lambda: answers["devices"], DEVICE_FORMS, refresh_interval_seconds=5, max_age_seconds=60,
                              resolve_mig=resolve, clock=ManualClock())
    attribution.refresh()
    first = attribution.current().mapping
    assert first.allocations and not first.unresolved and len(resolved) == 1
    attribution.refresh()
    attribution.refresh()
    assert len(resolved) == 1 and attribution.current().mapping is first
    answers["devices"] = answers["devices"] + [AllocatedDevice("ns", "q", "c", "nvidia.com/gpu", GPU)]
    attribution.refresh()
    assert len(resolved) == 2 and len(attribution.current().mapping.allocations) == 2
    # Compared by value, not by the list's identity: an equal answer in a list of its own is not built again.
    second = attribution.current().mapping
    answers["devices"] = [dataclasses.replace(device) for device in answers["devices"]]
    attribution.refresh()
    assert len(resolved) == 2 and attribution.current().mapping is second


def test_an_unresolved_device_is_warned_about_once_while_it_stays_and_again_when_it_comes_back(log_stream):
    mig = "MIG-0b2c4d5e-aaaa-5bbb-8ccc-ddddeeeeffff"  # NVML (here: nobody) cannot resolve it
    unresolvable = AllocatedDevice("ns", "p", "c", "nvidia.com/mig-1g.10gb", mig)
    whole = [AllocatedDevice("ns", f"p{index}", "c", "nvidia.com/gpu", GPU) for index in range(3)]
    answers = {"devices": [unresolvable, whole[0]]}
    attribution = Attribution(lambda: list(answers["devices"]), DEVICE_FORMS, refresh_interval_seconds=5, max_age_seconds=60,
                              resolve_mig=lambda device_id: None, clock=ManualClock())
    for devices in ([unresolvable, whole[0]], [unresolvable, whole[1]], [whole[2]], [unresolvable]):
        answers["devices"] = devices  # each a new mapping: the warning is considered every time
        attribution.refresh()
    warnings = [line for line in log_stream.getvalue().splitlines() if "cannot be matched to dcgm samples" in line]
    assert len(warnings) == 2 and all(mig in line for line in warnings)
