"""The XID counters' bounds: a container's series forgotten an hour after its pod left the mapping, and at
most so many kept, those whose pods left the longest ago dropped first; a GPU lost by index alone."""

from __future__ import annotations

from exporter.base.errors import KubeletError
from exporter.core.attribution import Attribution
from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import Mapping
from exporter.vendors.nvidia.shares.xid_counters import XidCounters
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.nvml.events import EventsStatus, XidEvent
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.clocks import ManualClock

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
WHOLE0 = GpuIdentity(GPU0, "0", "nvidia0", "")
UP = EventsStatus(True, frozenset())
A_79 = (f'pod_gpu_container_xid_errors_total{{{{UUID="{GPU0}",gpu="0",namespace="ml",pod="a",container="main",'
        'xid="79"}} {}')


def holding(*pods: str) -> Mapping:
    return Mapping(owners={GpuKey("UUID", GPU0, ""): tuple(Owner("ml", pod, "main") for pod in pods)})


def container_series(counters: XidCounters) -> list:
    return [line for line in counters.text().decode().splitlines()
            if line.startswith("pod_gpu_container_xid_errors_total{")]


def test_a_containers_counters_go_once_its_pod_has_been_gone_longer_than_the_retention():
    now, current = [0.0], [holding("a", "b")]
    counters = XidCounters(lambda: current[0], lambda: UP, "kubernetes", clock=lambda: now[0])
    counters.record(XidEvent(WHOLE0, "79"))
    current[0] = holding("a")  # b left at once; a stays
    now[0] = 3600.0
    assert len(container_series(counters)) == 2  # b gone exactly the retention: still served
    now[0] = 3600.5
    assert container_series(counters) == [f'pod_gpu_container_xid_errors_total{{UUID="{GPU0}",gpu="0",'
                                          f'namespace="ml",pod="a",container="main",xid="79"}} 1']
    now[0] = 100_000.0  # a, still in the mapping, keeps its counter however long ago the XID was
    assert len(container_series(counters)) == 1
    assert f'pod_gpu_device_xid_errors_total{{UUID="{GPU0}",gpu="0",xid="79"}} 1' in counters.text().decode()


def test_past_the_most_series_those_whose_pods_left_the_longest_ago_go_first_said_once(log_stream):
    now, current = [0.0], [holding()]
    counters = XidCounters(lambda: current[0], lambda: UP, "kubernetes", most_series=3, clock=lambda: now[0])
    for second, pod in enumerate(("p0", "p1", "p2", "p3", "p4")):
        now[0], current[0] = float(second), holding(pod)  # one pod after another on the GPU
        counters.record(XidEvent(WHOLE0, "13"))
    assert [line.split('pod="')[1].split('"')[0] for line in container_series(counters)] == ["p2", "p3", "p4"]
    assert counters.dropped_series == 2
    assert log_stream.getvalue().count("more containers have XID counters than are kept") == 1


def test_a_gpu_lost_before_it_was_named_is_served_by_its_index():
    counters = XidCounters(Mapping, lambda: EventsStatus(False, frozenset({GpuIdentity("", "1", "", "")})), "legacy")
    assert 'pod_gpu_device_lost{gpu="1"} 1' in counters.text().decode().splitlines()


def test_a_kubelet_outage_past_the_mapping_max_age_forgets_no_holder_nor_resets_its_counter():
    # A real Attribution on a hand-moved clock, read as the shares read it (mapping_in_use): once the
    # kubelet's mapping aged out, the counters that read attribution.current().mapping took every holder
    # for gone, forgot it after the retention, and counted it again from 0 when the kubelet came back.
    clock, devices, failing = ManualClock(0.0), [AllocatedDevice("ml", "a", "main", "nvidia.com/gpu", GPU0)], [False]

    def list_devices():
        if failing[0]:
            raise KubeletError("kubelet gone", reason="unavailable")
        return list(devices)

    attribution = Attribution(list_devices, DEVICE_FORMS, refresh_interval_seconds=5, max_age_seconds=5, clock=clock)
    counters = XidCounters(attribution.mapping_in_use, lambda: UP, "kubernetes", retention_seconds=60, clock=clock)
    attribution.refresh()
    counters.record(XidEvent(WHOLE0, "79"))
    failing[0] = True
    for clock.now in (1.0, 10.0, 100.0, 1000.0):  # an outage far past max age and retention, scraped
        attribution.refresh()
        assert attribution.mapping_in_use() is None or clock.now < 5
        assert container_series(counters) == [A_79.format(1)]
    failing[0] = False
    attribution.refresh()
    counters.record(XidEvent(WHOLE0, "79"))
    assert container_series(counters) == [A_79.format(2)]  # counted on, never from 0 again
