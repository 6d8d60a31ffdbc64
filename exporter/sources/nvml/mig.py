"""Optional NVML lookups that turn "MIG-<uuid>" device IDs into (parent GPU UUID, GPU instance ID)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from exporter.base.logs import log

# Failed lookups are retried this often: a MIG device the kubelet reports before NVML sees it (or an
# NVML hiccup) resolves later, while a device that never resolves costs one lookup per interval.
RETRY_FAILED_AFTER_SECONDS = 300.0
# MIG UUIDs change whenever instances are re-created, so entries come and go; bound the cache.
_MAX_CACHED = 4096


class NvmlMigResolver:
    """Resolves MIG device UUIDs through an NVML binding (pynvml or a stand-in with the same functions).

    A MIG UUID names one GPU instance for its whole life, so answers are kept for good; failures are
    kept too (negative cache) and retried only after `retry_failed_after_seconds`. Lookups run on the
    mapping refresher, never on a scrape, and one at a time: NVML calls are not free.
    """

    def __init__(self, nvml: Any, retry_failed_after_seconds: float = RETRY_FAILED_AFTER_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self._nvml = nvml
        self._retry_after = retry_failed_after_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._found: Dict[str, Tuple[str, str]] = {}
        self._failed_at: Dict[str, float] = {}
        self.lookups = 0  # NVML lookups made (cache misses), for tests and debugging

    def __call__(self, mig_uuid: str) -> Optional[Tuple[str, str]]:
        with self._lock:
            found = self._found.get(mig_uuid)
            if found is not None:
                return found
            failed_at = self._failed_at.get(mig_uuid)
            if failed_at is not None and self._clock() - failed_at < self._retry_after:
                return None
            self.lookups += 1
            try:
                result = self._lookup(mig_uuid)
                problem = "" if result is not None else "NVML answered an unexpected MIG parent"
            except Exception as exc:  # any NVML failure (NVMLError, a driver gone away) means "unknown"
                result, problem = None, str(exc) or type(exc).__name__
            if result is None:
                # The first failure of a device is worth a line; its periodic retries are not.
                level = "debug" if mig_uuid in self._failed_at else "info"
                log(level, "NVML cannot resolve a MIG device; it stays unresolved", device_id=mig_uuid, error=problem)
            self._remember(mig_uuid, result)
            return result

    def _lookup(self, mig_uuid: str) -> Optional[Tuple[str, str]]:
        nvml = self._nvml
        # Bytes work with every nvidia-ml-py: old releases take only bytes, newer ones convert str.
        handle = nvml.nvmlDeviceGetHandleByUUID(mig_uuid.encode())
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
        parent_uuid = nvml.nvmlDeviceGetUUID(parent)
        instance_id = nvml.nvmlDeviceGetGpuInstanceId(handle)
        if isinstance(parent_uuid, bytes):  # old nvidia-ml-py returns bytes
            parent_uuid = parent_uuid.decode("ascii", "replace")
        if not isinstance(parent_uuid, str) or not parent_uuid.startswith("GPU-"):
            return None
        if isinstance(instance_id, bool) or not isinstance(instance_id, int) or instance_id < 0:
            return None
        return parent_uuid, str(instance_id)

    def _remember(self, mig_uuid: str, result: Optional[Tuple[str, str]]) -> None:
        if len(self._found) + len(self._failed_at) >= _MAX_CACHED:
            self._found.clear()
            self._failed_at.clear()
        if result is None:
            self._failed_at[mig_uuid] = self._clock()
        else:
            self._found[mig_uuid] = result
            self._failed_at.pop(mig_uuid, None)
