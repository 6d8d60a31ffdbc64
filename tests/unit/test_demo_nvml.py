"""The demo's simulated NVML answers the calls the exporter makes as nvidia-ml-py does: devices, processes, energy, XID events."""

from __future__ import annotations

import pytest

from exporter.vendors.nvidia.demo.nvml import (LOST_AFTER_SECONDS, LOST_GPU, NO_INSTANCE, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_TIMEOUT,
                                XID_FALLEN_OFF_THE_BUS, XID_GPU, NVMLError, SimulatedNvml,
                                nvmlEventTypeXidCriticalError)
from exporter.vendors.nvidia.demo.workload import SIMULATED_PROCESSES, gpu_uuid
from exporter.vendors.nvidia.nvml.processes import NvmlProcessReader


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


def _register(nvml: SimulatedNvml, gpus) -> object:
    events = nvml.nvmlEventSetCreate()
    for index in gpus:
        nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(index), nvmlEventTypeXidCriticalError, events)
    return events


def _refusal(call) -> int:
    with pytest.raises(NVMLError) as raised:
        call()
    return raised.value.value


def test_xids_come_on_the_shared_gpu_now_and_then_as_the_event_api_delivers_them():
    clock = ManualClock()
    nvml = SimulatedNvml([], clock=clock)
    events = _register(nvml, [index for index in range(nvml.nvmlDeviceGetCount()) if index != LOST_GPU])
    assert _refusal(lambda: nvml.nvmlEventSetWait_v2(events, 0)) == NVML_ERROR_TIMEOUT  # nothing yet
    clock.now += 60
    first, second = nvml.nvmlEventSetWait_v2(events, 0), nvml.nvmlEventSetWait_v2(events, 0)
    assert nvml.nvmlDeviceGetUUID(first.device) == gpu_uuid(XID_GPU)
    assert (first.eventType, first.eventData, second.eventData) == (nvmlEventTypeXidCriticalError, 13, 31)
    assert (first.gpuInstanceId, first.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
    nvml.nvmlEventSetFree(events)


def test_gpu_3_falls_off_the_bus_after_a_while_and_stays_lost():
    clock = ManualClock()
    nvml = SimulatedNvml([], clock=clock)
    events = _register(nvml, [LOST_GPU])  # registered before it falls
    clock.now += LOST_AFTER_SECONDS - 0.1
    assert _refusal(lambda: nvml.nvmlEventSetWait_v2(events, 0)) == NVML_ERROR_TIMEOUT
    clock.now += 0.1
    fall = nvml.nvmlEventSetWait_v2(events, 0)  # the driver's last word on it: XID 79
    assert (nvml.nvmlDeviceGetUUID(fall.device), fall.eventData) == (gpu_uuid(LOST_GPU), XID_FALLEN_OFF_THE_BUS)
    assert _refusal(lambda: nvml.nvmlEventSetWait_v2(events, 0)) == NVML_ERROR_GPU_IS_LOST
    assert _refusal(lambda: _register(nvml, [LOST_GPU])) == NVML_ERROR_GPU_IS_LOST
    clock.now += 3600
    assert _refusal(lambda: _register(nvml, [LOST_GPU])) == NVML_ERROR_GPU_IS_LOST
    # The other GPUs register and deliver as before.
    assert nvml.nvmlEventSetWait_v2(_register(nvml, [XID_GPU]), 0).device == XID_GPU


def test_a_function_the_simulation_lacks_answers_not_supported_as_an_older_driver_does():
    nvml = SimulatedNvml([])
    with pytest.raises(nvml.NVMLError) as raised:
        nvml.nvmlDeviceGetPcieThroughput(0, 0)
    assert raised.value.value == 3
    assert not hasattr(nvml, "something_else")
