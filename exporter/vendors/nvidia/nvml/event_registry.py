"""One NVML event set and the GPUs registered on it: which are, which refused, which are lost."""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, NamedTuple, Optional, Tuple

from exporter.base.logs import LogOnce, log
from exporter.core.identity import GpuIdentity

# NVML return codes, named here once for the event code and scripts/real_gpu_xid_check.py.
NOT_SUPPORTED = 3
TIMEOUT = 10  # the wait's time ran out with nothing to report
GPU_IS_LOST = 15  # a GPU fell off the bus (which one, registering again tells)


class Refusal(NamedTuple):
    gpu: str  # the GPU's NVML index
    error: str  # what NVML answered (NO_PERMISSION, …): a reason that may pass, so it is asked again


class Registration(NamedTuple):
    registered: int  # GPUs whose events the set receives
    lost: FrozenSet[GpuIdentity]  # GPUs NVML answered GPU_IS_LOST for (by index alone if never named)
    failed: Tuple[Refusal, ...]  # the GPUs refused for any other reason than NOT_SUPPORTED


class EventRegistry:
    """An NVML binding's event set, made again by each `register`; called on the event thread's runner only.

    GPUs are named by their NVML index, UUID and minor number as registered. A GPU that answers
    GPU_IS_LOST is named by what it was registered as before (a lost GPU may no longer tell its UUID),
    or by its index alone when it was lost before it ever told (an exporter started after an XID 79);
    one that answers NOT_SUPPORTED has no events (said once).
    """

    def __init__(self, nvml: Any):
        self.nvml = nvml
        self._set: Any = None
        self._by_index: Dict[int, GpuIdentity] = {}  # every GPU seen, kept to name it once lost
        self._by_uuid: Dict[str, GpuIdentity] = {}  # the GPUs registered on the current set
        self._unsupported = LogOnce()

    def register(self, event_types: int) -> Registration:
        nvml = self.nvml
        self.free()
        self._set = nvml.nvmlEventSetCreate()
        self._by_uuid = {}
        lost, failed = set(), []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                self._register_gpu(index, event_types)
            except nvml.NVMLError as exc:
                known = self._by_index.get(index)
                if exc.value == GPU_IS_LOST:
                    lost.add(known or GpuIdentity("", str(index), "", ""))
                elif exc.value == NOT_SUPPORTED:
                    self._unsupported.log(index, "info", "NVML has no XID events for this GPU; its XIDs are not "
                                          "counted", gpu=index, UUID=known.uuid if known else "")
                else:
                    failed.append(Refusal(str(index), str(exc) or type(exc).__name__))
        return Registration(len(self._by_uuid), frozenset(lost), tuple(failed))

    def _register_gpu(self, index: int, event_types: int) -> None:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        # Named by UUID as soon as it tells: lost before its minor number, it is still named so.
        self._by_index.setdefault(index, GpuIdentity(uuid, str(index), "", ""))
        gpu = GpuIdentity(uuid, str(index), f"nvidia{nvml.nvmlDeviceGetMinorNumber(handle)}", "")
        self._by_index[index] = gpu
        nvml.nvmlDeviceRegisterEvents(handle, event_types, self._set)  # the parent GPU's handle, never a MIG one
        self._by_uuid[gpu.uuid] = gpu

    def wait(self, timeout_ms: int) -> Any:
        """The next event's data; raises NVMLError (TIMEOUT when none came within `timeout_ms`)."""
        return self.nvml.nvmlEventSetWait_v2(self._set, timeout_ms)

    def identity_of(self, handle: Any) -> Optional[GpuIdentity]:
        """The registered GPU an event's device handle names, or None."""
        try:
            return self._by_uuid.get(_text(self.nvml.nvmlDeviceGetUUID(handle)))
        except self.nvml.NVMLError as exc:
            log("debug", "NVML cannot name an event's GPU", error=str(exc))
            return None

    def free(self) -> None:
        event_set, self._set = self._set, None
        if event_set is None:
            return
        try:
            self.nvml.nvmlEventSetFree(event_set)
        except self.nvml.NVMLError as exc:  # a set the driver cannot free (GPU lost) is dropped, not retried
            log("debug", "NVML could not free an event set", error=str(exc))


def _text(value) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
