"""LazyMigResolver: NVML opened at the first MIG-<uuid> lookup, never before, its outcome logged once."""

from __future__ import annotations

import threading

from exporter.core.mapping import build_mapping
from exporter.sources.nvml.library import LazyMigResolver
from support.devices import Device

PARENT = "GPU-be839661-c0f5-7452-284b-b875666df60c"
MIG = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"


class StandInNvml:
    """The pynvml functions the resolver calls; one MIG instance (GPU instance 7 of PARENT)."""

    def __init__(self, init_error=None):
        self.init_error = init_error
        self.calls = []

    def nvmlInit(self):  # noqa: N802 - NVML's names
        self.calls.append("nvmlInit")
        if self.init_error:
            raise self.init_error

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        self.calls.append("nvmlDeviceGetHandleByUUID")
        if uuid != MIG.encode():
            raise RuntimeError("Not Found")
        return "mig"

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):  # noqa: N802
        return "parent"

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        return PARENT

    def nvmlDeviceGetGpuInstanceId(self, handle):  # noqa: N802
        return 7


def test_nothing_is_opened_or_logged_until_a_mig_uuid_is_looked_up(log_stream):
    nvml = StandInNvml()
    resolver = LazyMigResolver(nvml)
    mapping = build_mapping([Device("ml", "a", "c", "nvidia.com/gpu", PARENT)], resolver)  # no MIG-<uuid>
    assert mapping.allocations and nvml.calls == [] and log_stream.getvalue() == ""
    assert resolver(MIG) == (PARENT, "7") and resolver(MIG) == (PARENT, "7")
    assert nvml.calls == ["nvmlInit", "nvmlDeviceGetHandleByUUID"]  # opened once, the answer cached
    assert log_stream.getvalue().count("NVML available") == 1


def test_nvml_that_does_not_open_is_noted_once_and_not_retried(log_stream):
    nvml = StandInNvml(init_error=RuntimeError("Driver Not Loaded"))
    resolver = LazyMigResolver(nvml)
    assert nvml.calls == []
    assert [resolver(MIG) for _ in range(3)] == [None, None, None]
    assert nvml.calls == ["nvmlInit"]
    log = log_stream.getvalue()
    assert log.count("will be reported as unresolved") == 1 and "Driver Not Loaded" in log


def test_concurrent_first_lookups_open_nvml_once():
    nvml = StandInNvml()
    resolver = LazyMigResolver(nvml)
    results = []
    threads = [threading.Thread(target=lambda: results.append(resolver(MIG))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(PARENT, "7")] * 8 and nvml.calls.count("nvmlInit") == 1
