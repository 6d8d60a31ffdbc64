"""The demo's simulated NVML answers the calls the exporter makes as nvidia-ml-py does: devices, processes, energy, XID events."""

from __future__ import annotations

import pytest

from exporter.demo.nvml import NO_INSTANCE, NVML_ERROR_TIMEOUT, XID_GPU, SimulatedNvml, nvmlEventTypeXidCriticalError
from exporter.demo.workload import SIMULATED_PROCESSES, gpu_uuid
from exporter.sources.nvml.processes import NvmlProcessReader


class ManualClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_process_reader_finds_every_simulated_process_on_its_gpu():
    clock = ManualClock()
    nvml = SimulatedNvml(list(SIMULATED_PROCESSES), clock=clock)
    devices = NvmlProcessReader(nvml, 1.0).read()
    assert [d.device.uuid for d in devices] == [gpu_uuid(i) for i in range(4)]
    by_gpu = {d.device.gpu: d for d in devices}
    for process in SIMULATED_PROCESSES:
        assert by_gpu[str(process.gpu)].memory_bytes[process.pid] > 0
    assert by_gpu["3"].memory_bytes == {} and by_gpu["3"].sm_ratio == {}
    first = by_gpu["0"].energy_mj
    clock.now += 10
    assert NvmlProcessReader(nvml, 1.0).read()[0].energy_mj > first  # the counter grows


def test_xids_come_on_the_shared_gpu_now_and_then_as_the_event_api_delivers_them():
    clock = ManualClock()
    nvml = SimulatedNvml([], clock=clock)
    events = nvml.nvmlEventSetCreate()
    for index in range(nvml.nvmlDeviceGetCount()):
        nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(index), nvmlEventTypeXidCriticalError, events)
    with pytest.raises(nvml.NVMLError) as raised:
        nvml.nvmlEventSetWait_v2(events, 0)  # nothing yet
    assert raised.value.value == NVML_ERROR_TIMEOUT
    clock.now += 60
    first, second = nvml.nvmlEventSetWait_v2(events, 0), nvml.nvmlEventSetWait_v2(events, 0)
    assert nvml.nvmlDeviceGetUUID(first.device) == gpu_uuid(XID_GPU)
    assert (first.eventType, first.eventData, second.eventData) == (nvmlEventTypeXidCriticalError, 13, 31)
    assert (first.gpuInstanceId, first.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
    nvml.nvmlEventSetFree(events)


def test_a_function_the_simulation_lacks_answers_not_supported_as_an_older_driver_does():
    nvml = SimulatedNvml([])
    with pytest.raises(nvml.NVMLError) as raised:
        nvml.nvmlDeviceGetPcieThroughput(0, 0)
    assert raised.value.value == 3
    assert not hasattr(nvml, "something_else")
