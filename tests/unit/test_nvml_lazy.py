"""LazyMigResolver: NVML opened at the first MIG-<uuid> lookup, never before, its outcome logged once."""

from __future__ import annotations

import threading

from exporter.core.mapping import build_mapping
from exporter.vendors.nvidia.nvml.library import LazyMigResolver
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device
from support.nvml_binding import FakeNvml

PARENT = "GPU-be839661-c0f5-7452-284b-b875666df60c"
MIG = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"


def test_nothing_is_opened_or_logged_until_a_mig_uuid_is_looked_up(log_stream):
    nvml = FakeNvml({MIG: (PARENT, 7)})
    resolver = LazyMigResolver(nvml)
    mapping = build_mapping(DEVICE_FORMS, [Device("ml", "a", "c", "nvidia.com/gpu", PARENT)], resolver)  # no MIG-<uuid>
    assert mapping.allocations and nvml.calls == [] and log_stream.getvalue() == ""
    assert resolver(MIG) == (PARENT, "7") and resolver(MIG) == (PARENT, "7")
    # opened once, looked up once: the second answer comes from the cache
    assert nvml.calls.count("nvmlInit") == 1 and nvml.calls.count("nvmlDeviceGetHandleByUUID") == 1
    assert log_stream.getvalue().count("NVML available") == 1


def test_nvml_that_does_not_open_is_noted_once_and_not_retried(log_stream):
    nvml = FakeNvml({MIG: (PARENT, 7)}, init_error=RuntimeError("Driver Not Loaded"))
    resolver = LazyMigResolver(nvml)
    assert nvml.calls == []
    assert [resolver(MIG) for _ in range(3)] == [None, None, None]
    assert nvml.calls == ["nvmlInit"]
    log = log_stream.getvalue()
    assert log.count("will be reported as unresolved") == 1 and "Driver Not Loaded" in log


def test_concurrent_first_lookups_open_nvml_once():
    nvml = FakeNvml({MIG: (PARENT, 7)})
    resolver = LazyMigResolver(nvml)
    results = []
    threads = [threading.Thread(target=lambda: results.append(resolver(MIG))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(PARENT, "7")] * 8 and nvml.calls.count("nvmlInit") == 1
