"""A stand-in for the pynvml module's MIG lookup functions, for the MIG resolvers' unit tests.

The process-mode and end-to-end tests use the C fake libnvidia-ml.so.1 under the real binding
(support.nvml_node); these tests need only the five calls a MIG lookup makes, and to count them.
"""

from __future__ import annotations

import threading


class NVMLError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNvml:
    """The outside world: the few pynvml functions the resolver calls, counting every call.

    MIG handles are the MIG UUIDs as bytes (what the resolver passes), parent handles "parent:<uuid>".
    """

    def __init__(self, instances=None, init_error=None, uuid_as_bytes=False):
        self.instances = dict(instances or {})  # MIG UUID -> (parent UUID, GPU instance ID)
        self.init_error = init_error
        self.uuid_as_bytes = uuid_as_bytes  # old nvidia-ml-py returned bytes
        self.fail_with = None
        self.calls = []
        self._lock = threading.Lock()

    def _record(self, name):
        with self._lock:
            self.calls.append(name)

    def nvmlInit(self):  # noqa: N802 - NVML's names
        self._record("nvmlInit")
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        self._record("nvmlDeviceGetHandleByUUID")
        if self.fail_with:
            raise self.fail_with
        if not isinstance(uuid, bytes) or uuid.decode() not in self.instances:
            raise NVMLError("Not Found")
        return uuid

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):  # noqa: N802
        self._record("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return "parent:" + self.instances[handle.decode()][0]

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        self._record("nvmlDeviceGetUUID")
        uuid = handle.split(":", 1)[1]
        return uuid.encode() if self.uuid_as_bytes else uuid

    def nvmlDeviceGetGpuInstanceId(self, handle):  # noqa: N802
        self._record("nvmlDeviceGetGpuInstanceId")
        return self.instances[handle.decode()][1]

