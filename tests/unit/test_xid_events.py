"""XID events: the event thread through the real nvidia-ml-py binding over the fake libnvidia-ml.so.1 in C
(loaded into this process), and the counters it feeds, read against a mapping."""

from __future__ import annotations

from typing import List

import pytest

from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import Mapping
from exporter.vendors.nvidia.shares.xid_counters import XidCounters, holders_of
from exporter.vendors.nvidia.nvml.events import EventsStatus, XidEvent, XidEventWatcher
from exporter.vendors.nvidia.nvml.library import open_nvml
from support.waiting import wait_until

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
GPU2 = "GPU-bbbbbbbb-cccc-dddd-eeee-ffffffffffff"
MIG_A = "MIG-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e"


def watching(events: List[XidEvent], **timing) -> XidEventWatcher:
    watcher = XidEventWatcher(open_nvml, events.append, wait_seconds=0.2, min_backoff_seconds=0.05,
                              max_backoff_seconds=0.2, retry_seconds=0.2, **timing)
    watcher.start()
    return watcher


def test_events_name_their_gpu_and_mig_instance(nvml_node):
    nvml_node.gpu(0, GPU0, minor=4).gpu(1, GPU1).mig(1, 3, MIG_A).write()
    events: List[XidEvent] = []
    watcher = watching(events)
    try:
        wait_until(lambda: watcher.status().up)
        nvml_node.xid(GPU0, 79).xid(GPU1, 31, gpu_instance=3).xid(GPU1, 999)
        wait_until(lambda: len(events) == 3)
        assert events == [XidEvent(GpuIdentity(GPU0, "0", "nvidia4", ""), "79"),
                          XidEvent(GpuIdentity(GPU1, "1", "nvidia1", "3"), "31"),
                          XidEvent(GpuIdentity(GPU1, "1", "nvidia1", ""), "999")]
    finally:
        watcher.stop()


def test_a_lost_gpu_is_reported_and_an_unsupported_one_skipped_while_the_others_count(nvml_node):
    nvml_node.gpu(0, GPU0).gpu(1, GPU1).gpu(2, GPU2)
    nvml_node.fail("nvmlDeviceRegisterEvents", 15, GPU1).fail("nvmlDeviceRegisterEvents", 3, GPU2).write()
    events: List[XidEvent] = []
    watcher = watching(events)
    try:
        wait_until(lambda: watcher.status().lost and watcher.status().up)
        assert watcher.status() == EventsStatus(True, frozenset({GpuIdentity(GPU1, "1", "nvidia1", "")}))
        nvml_node.xid(GPU2, 43).xid(GPU0, 48)
        wait_until(lambda: events)
        assert [event.device.uuid for event in events] == [GPU0]
        nvml_node.lines = [line for line in nvml_node.lines if "15" not in line.split()]
        nvml_node.write()  # GPU 1 is back: the next registration finds it
        wait_until(lambda: not watcher.status().lost)
        nvml_node.xid(GPU1, 13)
        wait_until(lambda: len(events) == 2)
        assert events[1].device.uuid == GPU1
    finally:
        watcher.stop()


def test_a_failing_wait_registers_again_and_events_come_after(nvml_node):
    # Every wait answers GPU_IS_LOST; the 1 ms hang notes each wait in the node's .hanging file.
    nvml_node.gpu(0, GPU0).fail("nvmlEventSetWait", 15).hang("nvmlEventSetWait", 1).write()
    events: List[XidEvent] = []
    watcher = watching(events)
    try:
        wait_until(lambda: nvml_node.hanging().count("nvmlEventSetWait") >= 3)  # registered again each time
        assert not watcher.status().up
        nvml_node.lines = [line for line in nvml_node.lines if not line.startswith("fail")]
        nvml_node.write()
        wait_until(lambda: watcher.status().up)
        nvml_node.xid(GPU0, 79)
        wait_until(lambda: events)
    finally:
        watcher.stop()


def test_without_nvml_the_thread_reports_down_and_keeps_trying(tmp_path, monkeypatch, fake_nvml_loaded):
    monkeypatch.setenv("FAKE_NVML_NODE", str(tmp_path / "absent.txt"))  # nvmlInit: driver not loaded
    watcher = watching([])
    try:
        assert watcher.status() == EventsStatus(False, frozenset())
    finally:
        watcher.stop()


def test_a_gpu_that_keeps_refusing_events_is_said_once_while_it_lasts_and_once_when_it_stops(nvml_node, log_stream):
    # NO_PERMISSION (4) on GPU 1 at every registration; each registration notes itself in .hanging.
    nvml_node.gpu(0, GPU0).gpu(1, GPU1).fail("nvmlDeviceRegisterEvents", 4, GPU1)
    nvml_node.hang("nvmlEventSetCreate", 1).write()
    watcher = watching([])
    try:
        wait_until(lambda: watcher.status().up and nvml_node.hanging().count("nvmlEventSetCreate") >= 5)
        assert log_stream.getvalue().count("NVML refused XID events") == 1, log_stream.getvalue()
        nvml_node.lines = [line for line in nvml_node.lines if not line.startswith("fail")]
        nvml_node.write()
        wait_until(lambda: "no longer refuses XID events" in log_stream.getvalue())
        log = log_stream.getvalue()
        assert log.count("NVML refused XID events") == 1 and log.count("no longer refuses") == 1, log
    finally:
        watcher.stop()


@pytest.mark.parametrize("call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID"])
def test_a_gpu_lost_before_it_was_ever_named_is_reported_by_its_index(nvml_node, call):
    # As after a restart on a node whose GPU 1 already fell off the bus: NVML cannot even name it.
    nvml_node.gpu(0, GPU0).gpu(1, GPU1).fail(call, 15, GPU1).write()
    events: List[XidEvent] = []
    watcher = watching(events)
    try:
        wait_until(lambda: watcher.status().lost and watcher.status().up)
        assert watcher.status() == EventsStatus(True, frozenset({GpuIdentity("", "1", "", "")}))
        nvml_node.lines = [line for line in nvml_node.lines if not line.startswith("fail")]
        nvml_node.write()  # reset: it registers, under its name
        wait_until(lambda: not watcher.status().lost)
        nvml_node.xid(GPU1, 79)
        wait_until(lambda: events)
        assert events == [XidEvent(GpuIdentity(GPU1, "1", "nvidia1", ""), "79")]
    finally:
        watcher.stop()


@pytest.mark.parametrize("refused", [True, False], ids=["every-gpu-not-supported", "no-gpu"])
def test_with_no_gpu_registered_events_are_down_nothing_is_waited_on_and_registration_retried(nvml_node, refused):
    if refused:
        nvml_node.gpu(0, GPU0).fail("nvmlDeviceRegisterEvents", 3, GPU0)
    nvml_node.hang("nvmlEventSetCreate", 1).hang("nvmlEventSetWait", 1).write()
    watcher = watching([])
    try:
        wait_until(lambda: nvml_node.hanging().count("nvmlEventSetCreate") >= 3)  # registered again, and again
        assert watcher.status() == EventsStatus(False, frozenset())
        assert "nvmlEventSetWait" not in nvml_node.hanging()
        nvml_node.lines = [line for line in nvml_node.lines if line.startswith("hang")]
        nvml_node.gpu(0, GPU0).write()  # a GPU that takes events: the next registration finds it
        wait_until(lambda: watcher.status().up)
    finally:
        watcher.stop()


MAPPING = Mapping(owners={
    GpuKey("UUID", GPU0, ""): (Owner("ml", "a", "main"), Owner("ml", "b", "main")),
    GpuKey("UUID", GPU1, "3"): (Owner("ml", "small", "c"),),
    GpuKey("gpu", "1", "5"): (Owner("web", "other", "c"),),  # a MIG instance claimed by index
}, extra_labels={("ml", "small"): (("workload", "trainer"),)})
WHOLE0 = GpuIdentity(GPU0, "0", "nvidia0", "")
WHOLE1 = GpuIdentity(GPU1, "1", "nvidia1", "")


def test_holders_of_a_mig_instance_and_of_a_whole_gpu():
    assert holders_of(MAPPING, WHOLE0) == (Owner("ml", "a", "main"), Owner("ml", "b", "main"))
    assert holders_of(MAPPING, WHOLE1._replace(instance="3")) == (Owner("ml", "small", "c"),)
    # An XID tied to no instance: every instance's holders, whichever name their key uses.
    assert holders_of(MAPPING, WHOLE1) == (Owner("ml", "small", "c"), Owner("web", "other", "c"))


def test_counters_count_on_the_holders_of_that_moment_and_keep_those_that_left():
    current = [MAPPING]
    counters = XidCounters(lambda: current[0], lambda: EventsStatus(True, frozenset({WHOLE1})), "kubernetes")
    counters.record(XidEvent(WHOLE1._replace(instance="3"), "31"))
    counters.record(XidEvent(WHOLE0, "79"))
    current[0] = Mapping()  # everyone left
    counters.record(XidEvent(WHOLE0, "79"))
    text = counters.text().decode()
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        f'pod_gpu_device_xid_errors_total{{UUID="{GPU0}",gpu="0",xid="79"}} 2',
        f'pod_gpu_device_xid_errors_total{{UUID="{GPU1}",gpu="1",GPU_I_ID="3",xid="31"}} 1',
        f'pod_gpu_container_xid_errors_total{{UUID="{GPU0}",gpu="0",namespace="ml",pod="a",container="main",xid="79"}} 1',
        f'pod_gpu_container_xid_errors_total{{UUID="{GPU0}",gpu="0",namespace="ml",pod="b",container="main",xid="79"}} 1',
        f'pod_gpu_container_xid_errors_total{{UUID="{GPU1}",gpu="1",GPU_I_ID="3",namespace="ml",pod="small",'
        f'container="c",workload="trainer",xid="31"}} 1',
        f'pod_gpu_device_lost{{UUID="{GPU1}",gpu="1"}} 1',
        "pod_gpu_exporter_xid_events_up 1"]
    assert "# TYPE pod_gpu_container_xid_errors_total counter" in text


def test_before_any_event_only_the_status_is_written():
    counters = XidCounters(Mapping, lambda: EventsStatus(False, frozenset()), "legacy")
    assert counters.text().decode().splitlines()[-1] == "pod_gpu_exporter_xid_events_up 0"
    assert "xid_errors_total" not in counters.text().decode()
