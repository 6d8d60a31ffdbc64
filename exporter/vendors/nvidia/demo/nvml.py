"""The demo's NVML: a Python object with the nvidia-ml-py functions the exporter calls, answering for the simulated node."""

from __future__ import annotations

import math
import threading
import time
from typing import Callable, List, NamedTuple, Optional, Tuple

from exporter.vendors.nvidia.demo.workload import GPU_COUNT, SimulatedProcess, gpu_energy_mj, gpu_load, gpu_uuid

# nvml.h return codes, as pynvml's NVMLError carries them in .value.
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
nvmlEventTypeXidCriticalError = 0x8  # noqa: N816 - pynvml's name
# An XID not tied to a MIG instance carries this as its GPU and compute instance IDs.
NO_INSTANCE = 0xFFFFFFFF
# The XIDs the simulated node raises in turn: 13 (graphics engine exception, an application's fault)
# and 31 (GPU memory page fault), the two most often seen on busy nodes; on GPU 2, the shared one.
XIDS = (13, 31)
XID_GPU = 2
# The first comes once the first shares are served (about 3 s after start, later on a loaded machine):
# the warning it logs then reads as part of the running node, not as a fault at start-up.
FIRST_XID_AFTER_SECONDS = 8.0
XID_EVERY_SECONDS = 12.0
# GPU 3 falls off the bus this long after start: NVML reports an XID 79 on it, then a wait on a set
# that holds it answers GPU_IS_LOST, and so does registering it again, for good (on a real node, until
# the GPU is reset). GPU 3 is in none of the README's opening lines, and is lost well after the first
# shares, so that the warnings it brings do not read as a fault at start-up.
LOST_GPU = 3
LOST_AFTER_SECONDS = 15.0
XID_FALLEN_OFF_THE_BUS = 79
DRIVER_VERSION = "580.105.08"
INIT_WAIT_SECONDS = 2.0


class NVMLError(Exception):
    """pynvml's exception: `value` is the NVML return code."""

    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class ProcessInfo(NamedTuple):  # nvmlProcessInfo_t's fields the exporter reads
    pid: int
    usedGpuMemory: int  # noqa: N815 - pynvml's name


class ProcessUtilizationSample(NamedTuple):  # nvmlProcessUtilizationSample_t
    pid: int
    timeStamp: int  # noqa: N815
    smUtil: int  # noqa: N815
    memUtil: int  # noqa: N815
    encUtil: int = 0  # noqa: N815
    decUtil: int = 0  # noqa: N815


class EventData(NamedTuple):  # nvmlEventData_t
    device: int  # the GPU's handle
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815 - the XID
    gpuInstanceId: int  # noqa: N815
    computeInstanceId: int  # noqa: N815


class _EventSet:
    def __init__(self):
        self.handles: List[int] = []


class SimulatedNvml:
    """Answers as the driver of the demo's four L4 GPUs would: no MIG, processes whose use follows each
    GPU's load curve (the same one the simulated dcgm-exporter serves), a growing energy counter, an
    XID on GPU 2 now and then, and GPU 3 lost to its event API after a while. A handle is the GPU's index."""

    NVMLError = NVMLError

    def __init__(self, processes: List[SimulatedProcess], clock: Callable[[], float] = time.monotonic,
                 ready: Optional[threading.Event] = None):
        self._processes = processes
        self._ready = ready
        self._clock = clock
        self._started = clock()
        self._stopped = threading.Event()
        self._xids_delivered = 0
        self._fall_reported = False  # LOST_GPU's XID 79 delivered

    def close(self) -> None:
        """Ends every event wait at once (as a timeout): the demo is stopping."""
        self._stopped.set()

    def _elapsed(self) -> float:
        return self._clock() - self._started

    def __getattr__(self, name: str):
        """Any other nvml* function answers NOT_SUPPORTED, as a driver without it does: the exporter
        then serves what it can, as on such a node."""
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def not_supported(*_args, **_kwargs):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

        return not_supported

    # --- initialisation and devices -----------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names throughout
        # As a real nvmlInit waking the GPUs takes a moment, this one waits (briefly) for `ready`: the
        # exporter's first pod list, without which its first refresh would warn that the pod index is missing.
        if self._ready is not None:
            self._ready.wait(INIT_WAIT_SECONDS)

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return DRIVER_VERSION  # as the dcgm template's DCGM_FI_DRIVER_VERSION says

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802
        return "NVIDIA L4"

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return GPU_COUNT

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        if not 0 <= index < GPU_COUNT:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid) -> int:  # noqa: N802
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for index in range(GPU_COUNT):
            if gpu_uuid(index) == text:
                return index
        raise NVMLError(NVML_ERROR_NOT_FOUND)  # no MIG-<uuid> on L4s

    def nvmlDeviceGetUUID(self, handle: int) -> str:  # noqa: N802
        return gpu_uuid(handle)

    def nvmlDeviceGetIndex(self, handle: int) -> int:  # noqa: N802
        return handle

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:  # noqa: N802
        return handle

    def nvmlDeviceGetMigMode(self, handle: int):  # noqa: N802
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # an L4 has no MIG

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:  # noqa: N802
        return gpu_energy_mj(handle, self._elapsed())

    # --- processes ----------------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> List[ProcessInfo]:  # noqa: N802
        elapsed = self._elapsed()
        return [ProcessInfo(p.pid, p.memory_bytes(elapsed)) for p in self._processes if p.gpu == handle]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> List[ProcessInfo]:  # noqa: N802
        return []

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: int) -> List[ProcessInfo]:  # noqa: N802
        return []

    def nvmlDeviceGetProcessUtilization(self, handle: int, since_us: int) -> List[ProcessUtilizationSample]:  # noqa: N802
        elapsed = self._elapsed()
        load = gpu_load(handle, elapsed)
        now_us = int(time.time() * 1_000_000)
        samples = [ProcessUtilizationSample(p.pid, now_us, round(100 * load * p.sm_part), round(60 * load * p.sm_part))
                   for p in self._processes if p.gpu == handle]
        if not samples:
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # as the driver says when no process ran in the window
        return samples

    # --- events (XIDs) ------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        return _EventSet()

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: _EventSet) -> None:  # noqa: N802
        self.nvmlDeviceGetHandleByIndex(handle)
        if handle == LOST_GPU and self._elapsed() >= LOST_AFTER_SECONDS:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if event_types & nvmlEventTypeXidCriticalError:
            event_set.handles.append(handle)

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> EventData:  # noqa: N802
        """The next event of a registered GPU when it falls within `timeout_ms`, else NVMLError TIMEOUT."""
        due, answer = self._next_event(event_set.handles)
        wait = min(timeout_ms / 1000.0, max(due - self._elapsed(), 0.0))
        if self._stopped.wait(wait) or self._elapsed() < due:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        return answer()

    def _next_event(self, handles: List[int]) -> Tuple[float, Callable[[], EventData]]:
        """When the next event of these GPUs is due (elapsed seconds, inf for none), and what delivers it."""
        coming = [(math.inf, self._next_xid)]  # none registered: the wait only times out
        if XID_GPU in handles:
            coming.append((FIRST_XID_AFTER_SECONDS + self._xids_delivered * XID_EVERY_SECONDS, self._next_xid))
        if LOST_GPU in handles:
            coming.append((LOST_AFTER_SECONDS, self._fall_off_the_bus))
        return min(coming, key=lambda event: event[0])

    def _next_xid(self) -> EventData:
        xid = XIDS[self._xids_delivered % len(XIDS)]
        self._xids_delivered += 1
        return EventData(XID_GPU, nvmlEventTypeXidCriticalError, xid, NO_INSTANCE, NO_INSTANCE)

    def _fall_off_the_bus(self) -> EventData:
        """LOST_GPU's XID 79 once; after it, the set that holds the GPU answers only GPU_IS_LOST (as the
        driver does until the GPU is registered no more)."""
        if self._fall_reported:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        self._fall_reported = True
        return EventData(LOST_GPU, nvmlEventTypeXidCriticalError, XID_FALLEN_OFF_THE_BUS, NO_INSTANCE, NO_INSTANCE)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:  # noqa: N802
        event_set.handles.clear()

