"""NVML's per-process data: the processes on each GPU and MIG instance, their memory and SM utilisation, the board's energy."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from exporter.base.errors import ExporterError
from exporter.base.logs import DependencyReporter
from exporter.core.identity import GpuIdentity

# NVML return codes the reader tells apart (nvml.h); pynvml raises NVMLError with them as .value.
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
# A MIG device handle slot without an instance in it answers NOT_FOUND (or INVALID_ARGUMENT on some
# drivers); both mean "no device here", not a failure.
_EMPTY_MIG_SLOT = (2, _NOT_FOUND)
# The process-list calls, in the order their answers are merged: a process may be in several lists
# (an MPS client is also a compute process on some drivers); its memory is the same in each.
_PROCESS_LISTS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                  "nvmlDeviceGetMPSComputeRunningProcesses")


class NvmlError(ExporterError):
    """NVML could not list the node's devices (driver gone, GPU lost, library missing)."""


class DeviceProcesses(NamedTuple):
    device: GpuIdentity  # as dcgm-exporter's samples name it: UUID, NVML index, nvidia<minor>, GPU_I_ID
    memory_bytes: Dict[int, int]  # PID → framebuffer bytes it uses on this device
    sm_ratio: Optional[Dict[int, float]]  # PID → SM utilisation 0–1 over the window; None: NVML has none here
    # The board's total energy (mJ since the driver loaded), read once per GPU and repeated on each of
    # its MIG instances: NVML measures energy per board, never per instance. None: not supported.
    energy_mj: Optional[int] = None
    memory_slices: int = 0  # a MIG instance's size: its GPU instance's placement in memory slices; 0 whole GPU


class NvmlProcessReader:
    """Reads every device's processes through an NVML binding (pynvml), on the refresher thread.

    Per-process SM utilisation is what NVML sampled over the last `window_seconds`: the driver keeps
    a short ring of samples per process, and asking for those newer than now - window gives each
    refresh the recent ones whatever the refresh's timing.
    """

    def __init__(self, nvml: Any, window_seconds: float, clock: Callable[[], float] = time.time,
                 read_energy: bool = True):
        self._nvml = nvml
        self._window = window_seconds
        self._clock = clock
        self._read_energy = read_energy  # off only in benchmarks, to measure what the energy reads cost
        self._device_reporter = DependencyReporter("nvml")

    def read(self) -> List[DeviceProcesses]:
        """One pass over the node; raises NvmlError when the devices cannot be listed at all."""
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise NvmlError(f"NVML cannot list GPUs: {exc}", reason=_reason(exc)) from exc
        since_us = int((self._clock() - self._window) * 1_000_000)
        found: List[DeviceProcesses] = []
        problems = []
        for index in range(count):
            try:
                found += self._read_gpu(index, since_us)
            except nvml.NVMLError as exc:  # one lost GPU must not hide the others
                problems.append(f"GPU {index}: {exc}")
        if problems:
            self._device_reporter.failed("device", "NVML cannot read some GPUs; they get no per-process shares",
                                         errors="; ".join(problems))
        else:
            self._device_reporter.succeeded("NVML reads every GPU again")
        return found

    def _read_gpu(self, index: int, since_us: int) -> List[DeviceProcesses]:
        nvml = self._nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        # A MIG instance keeps its parent's UUID, index and minor number, as on dcgm-exporter's samples.
        gpu = GpuIdentity(_text(nvml.nvmlDeviceGetUUID(handle)), str(nvml.nvmlDeviceGetIndex(handle)),
                          f"nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}", "")
        energy = self._energy_mj(handle)
        if not self._mig_enabled(handle):
            return [self._read_device(handle, gpu, since_us)._replace(energy_mj=energy)]
        found = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as exc:
                if exc.value in _EMPTY_MIG_SLOT:
                    continue
                raise
            instance_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
            device = gpu._replace(instance=str(instance_id))
            slices = self._memory_slices(handle, instance_id) if energy is not None else 0
            found.append(self._read_device(mig, device, since_us)._replace(energy_mj=energy, memory_slices=slices))
        return found

    def _energy_mj(self, handle) -> Optional[int]:
        """The board's energy counter, or None where it cannot be had (pre-Volta GPUs, some vGPUs):
        then that GPU has no energy series, and its memory and SM shares are served as ever."""
        if not self._read_energy:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        except self._nvml.NVMLError:
            return None

    def _memory_slices(self, handle, instance_id: int) -> int:
        """The GPU instance's placement size, in memory slices (a 3g.40gb instance spans 4 of 8); 1 when
        NVML cannot tell, so that an instance is never left out of its GPU's energy."""
        nvml = self._nvml
        try:
            info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, instance_id))
        except nvml.NVMLError:
            return 1
        return max(int(info.placement.size), 1)

    def _mig_enabled(self, handle) -> bool:
        try:
            current, _pending = self._nvml.nvmlDeviceGetMigMode(handle)
        except self._nvml.NVMLError as exc:
            if exc.value == _NOT_SUPPORTED:  # pre-Ampere GPUs have no MIG
                return False
            raise
        return bool(current)

    def _read_device(self, handle, device: GpuIdentity, since_us: int) -> DeviceProcesses:
        memory: Dict[int, int] = {}
        for call in _PROCESS_LISTS:
            for process in getattr(self._nvml, call)(handle):
                used = process.usedGpuMemory or 0  # None where the driver cannot tell (WDDM, some vGPU)
                memory[process.pid] = max(memory.get(process.pid, 0), used)
        return DeviceProcesses(device, memory, self._sm_ratios(handle, since_us))

    def _sm_ratios(self, handle, since_us: int) -> Optional[Dict[int, float]]:
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, max(since_us, 0))
        except nvml.NVMLError as exc:
            if exc.value == _NOT_SUPPORTED:  # MIG instances, some older GPUs
                return None
            if exc.value == _NOT_FOUND:  # supported, but no process ran in the window
                return {}
            raise
        readings: Dict[int, List[int]] = {}
        for sample in samples:
            readings.setdefault(sample.pid, []).append(sample.smUtil)
        # Several samples of one process in the window: their mean is its utilisation over the window.
        return {pid: min(sum(values) / len(values) / 100.0, 1.0) for pid, values in readings.items()}


def _text(value) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


def _reason(exc: Exception) -> str:
    return {9: "driver_not_loaded", 12: "library_not_found", 15: "gpu_lost"}.get(getattr(exc, "value", None), "error")
