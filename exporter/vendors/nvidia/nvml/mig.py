"""Optional NVML lookups that turn "MIG-<uuid>" device IDs into (parent GPU UUID, GPU instance ID), and a
MIG device's placement on its GPU into its GPU instance ID."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Callable, Optional, Tuple

from exporter.base.bounded import BoundedRunner, CallTimeout
from exporter.base.cache import RetryingCache
from exporter.base.logs import LogOnce, log

# Failed lookups are retried this often: a MIG device the kubelet reports before NVML sees it (or an
# NVML hiccup) resolves later, while a device that never resolves costs one lookup per interval.
RETRY_FAILED_AFTER_SECONDS = 300.0
# A lookup is four NVML calls that answer in microseconds; one that takes longer is a wedged driver,
# and the mapping refresh (every GPU's attribution) must not wait for it.
LOOKUP_TIMEOUT_SECONDS = 2.0
# MIG UUIDs change whenever instances are re-created, so entries come and go; bound the cache
# (answers and failures together).
_MAX_CACHED = 4096
# nvmlDeviceGetGpuInstances fills the caller's array without being told its size: far above the 7 GPU
# instances a GPU holds at most.
_MAX_GPU_INSTANCES = 32


class NvmlMigResolver:
    """Resolves MIG device UUIDs through an NVML binding (pynvml or a stand-in with the same functions).

    A MIG UUID names one GPU instance for its whole life, so answers are kept for good; failures are
    kept too (negative cache) and retried only after `retry_failed_after_seconds`. Lookups run on the
    mapping refresher, never on a scrape, and one at a time: NVML calls are not free. Each runs on
    a worker thread and is waited for at most `timeout_seconds`: one that does not answer counts as
    a failed lookup (retried like any other), and while it still hangs, later lookups fail at once.
    """

    def __init__(self, nvml: Any, retry_failed_after_seconds: float = RETRY_FAILED_AFTER_SECONDS,
                 clock: Callable[[], float] = time.monotonic, timeout_seconds: float = LOOKUP_TIMEOUT_SECONDS,
                 runner: Optional[BoundedRunner] = None):
        self._nvml = nvml
        self._runner = runner or BoundedRunner("nvml-mig-lookup", timeout_seconds, "an NVML MIG lookup")
        self._lock = threading.Lock()  # one lookup at a time: concurrent asks of one device cost one
        self._cache: RetryingCache[str, Tuple[str, str]] = RetryingCache(
            self._lookup_logged, retry_failed_after_seconds, _MAX_CACHED, clock)
        self._placement_failures = LogOnce(_MAX_CACHED)  # placements whose lookup failed, logged once each

    @property
    def lookups(self) -> int:
        """NVML lookups made (cache misses and retries), for tests and debugging."""
        return self._cache.lookups

    def __call__(self, mig_uuid: str) -> Optional[Tuple[str, str]]:
        with self._lock:
            try:
                return self._cache.get(mig_uuid)
            except CallTimeout:
                # Not NVML's answer: a slow or hung call (or one refused while another hangs). The cache
                # keeps nothing for a lookup that raised, so it is asked again at the next refresh (and
                # refused at once while the call still hangs): a driver that answers a moment late
                # resolves the device then, not after the failure interval.
                return None

    def placement(self, parent_uuid: str, profile_id: int, start: int) -> Optional[str]:
        """The ID of the GPU instance of that profile whose placement starts there on the parent GPU, or None.

        What finds a dynamic MIG device, which the DRA driver makes when its claim is prepared and publishes
        without a UUID. Not cached: such instances are destroyed and made again as claims come and go, and
        one made again at the same placement may have another ID. A handful of NVML calls, run like a UUID
        lookup (one at a time, within the time bound; a hung call fails this and later lookups at once).
        """
        where = (parent_uuid, profile_id, start)
        with self._lock:
            try:
                found = self._runner.run(self._instance_at, *where)
                problem = "" if found is not None else "no GPU instance of that profile starts at that placement"
            except CallTimeout:
                return None
            except Exception as exc:  # any NVML failure: unresolved, as for a UUID
                found, problem = None, str(exc) or type(exc).__name__
        if found is not None:
            self._placement_failures.forget(where)
        else:
            self._placement_failures.log(where, "info", "NVML cannot find a MIG device's GPU instance; it stays "
                                         "unresolved", parent_uuid=parent_uuid, profile_id=profile_id,
                                         placement_start=start, error=problem)
        return found

    def _instance_at(self, parent_uuid: str, profile_id: int, start: int) -> Optional[str]:
        nvml = self._nvml
        parent = nvml.nvmlDeviceGetHandleByUUID(parent_uuid.encode())
        instances = (nvml.c_nvmlGpuInstance_t * _MAX_GPU_INSTANCES)()
        count = ctypes.c_uint(0)
        nvml.nvmlDeviceGetGpuInstances(parent, profile_id, instances, ctypes.byref(count))
        for instance in instances[:min(count.value, _MAX_GPU_INSTANCES)]:
            info = nvml.nvmlGpuInstanceGetInfo(instance)
            if info.profileId == profile_id and info.placement.start == start:
                return str(info.id)
        return None

    def _lookup_logged(self, mig_uuid: str) -> Optional[Tuple[str, str]]:
        try:
            result = self._runner.run(self._lookup, mig_uuid)
            problem = "" if result is not None else "NVML answered an unexpected MIG parent"
        except CallTimeout:
            raise  # the runner logged it (warn once, then debug); see __call__
        except Exception as exc:  # any NVML failure (NVMLError, a driver gone away): "unknown"
            result, problem = None, str(exc) or type(exc).__name__
        if result is None:
            # The first failure of a device is worth a line; its periodic retries are not.
            level = "debug" if self._cache.failed_before(mig_uuid) else "info"
            log(level, "NVML cannot resolve a MIG device; it stays unresolved", device_id=mig_uuid, error=problem)
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
