"""MIG-<uuid> resolution through NVML: cached answers and failures, errors as "unknown", the no-library path."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from exporter.core.identity import GpuKey, Owner
from exporter.core.mapping import build_mapping
from exporter.exposition.rewriter import Rewriter
from exporter.vendors.nvidia.nvml.library import make_mig_resolver
from exporter.vendors.nvidia.nvml.mig import NvmlMigResolver
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.clocks import ManualClock
from support.devices import Device
from support.nvml_binding import FakeNvml, NVMLError

PARENT = "GPU-be839661-c0f5-7452-284b-b875666df60c"
MIG_A = "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"
MIG_B = "MIG-7d1e0b55-9a3f-5c2e-b1d4-0f9e8d7c6b5a"


def test_resolves_parent_and_instance_and_caches_answers():
    nvml = FakeNvml({MIG_A: (PARENT, 13), MIG_B: (PARENT, 11)})
    resolver = NvmlMigResolver(nvml)
    assert resolver(MIG_A) == (PARENT, "13")
    assert resolver(MIG_B) == (PARENT, "11")
    calls = len(nvml.calls)
    for _ in range(5):
        assert resolver(MIG_A) == (PARENT, "13")
    assert len(nvml.calls) == calls and resolver.lookups == 2  # no NVML call for a known device


def test_bytes_from_an_old_nvidia_ml_py_are_decoded():
    resolver = NvmlMigResolver(FakeNvml({MIG_A: (PARENT, 3)}, uuid_as_bytes=True))
    assert resolver(MIG_A) == (PARENT, "3")


def test_failures_are_cached_then_retried_after_the_interval(log_stream):
    clock = ManualClock()
    nvml = FakeNvml({})
    resolver = NvmlMigResolver(nvml, retry_failed_after_seconds=300, clock=clock)
    assert resolver(MIG_A) is None
    calls = len(nvml.calls)
    clock.now += 299
    assert resolver(MIG_A) is None
    assert len(nvml.calls) == calls  # negative cache: NVML not asked again yet
    nvml.instances[MIG_A] = (PARENT, 5)  # the instance shows up in NVML later
    clock.now += 2
    assert resolver(MIG_A) == (PARENT, "5")
    assert resolver.lookups == 2
    log = log_stream.getvalue()
    assert log.count("NVML cannot resolve a MIG device") == 1 and "level=info" in log and "Not Found" in log


def test_a_failure_retried_is_logged_at_debug_only(log_stream):
    clock = ManualClock()
    resolver = NvmlMigResolver(FakeNvml({}), retry_failed_after_seconds=1, clock=clock)
    for _ in range(4):
        assert resolver(MIG_A) is None
        clock.now += 2
    lines = [line for line in log_stream.getvalue().splitlines() if "cannot resolve" in line]
    assert len(lines) == 4 and lines[0].count("level=info") == 1
    assert all("level=debug" in line for line in lines[1:])


@pytest.mark.parametrize("error", [NVMLError("GPU is lost"), RuntimeError(), OSError("driver gone"), KeyError("x")])
def test_any_nvml_error_is_unknown_never_raised(error):
    nvml = FakeNvml({MIG_A: (PARENT, 1)})
    nvml.fail_with = error
    assert NvmlMigResolver(nvml)(MIG_A) is None


@pytest.mark.parametrize("parent, instance", [("not-a-gpu-uuid", 1), (PARENT, -1), (PARENT, "1"), (None, 1)])
def test_unexpected_answers_are_unknown(parent, instance):
    assert NvmlMigResolver(FakeNvml({MIG_A: (parent, instance)}))(MIG_A) is None


def test_concurrent_lookups_of_one_device_ask_nvml_once():
    nvml = FakeNvml({MIG_A: (PARENT, 13)})
    resolver = NvmlMigResolver(nvml)
    results = []
    threads = [threading.Thread(target=lambda: results.append(resolver(MIG_A))) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [(PARENT, "13")] * 16
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == 1


def test_refreshes_resolve_through_the_cache_and_attribute_instance_samples():
    nvml = FakeNvml({MIG_A: (PARENT, 13), MIG_B: (PARENT, 11)})
    resolver = make_mig_resolver(nvml)
    assert isinstance(resolver, NvmlMigResolver)
    devices = [
        Device("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", MIG_A),
        Device("ml", "small-b", "c", "nvidia.com/mig-1g.10gb", MIG_B + "::1"),
    ]
    first = build_mapping(DEVICE_FORMS, devices, resolver)
    for _ in range(3):  # later refreshes of the same node
        assert build_mapping(DEVICE_FORMS, devices, resolver) == first
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == 2 and nvml.calls.count("nvmlInit") == 1
    assert first.owners == {
        GpuKey("UUID", PARENT, "13"): (Owner("ml", "small-a", "c"),),
        GpuKey("UUID", PARENT, "11"): (Owner("ml", "small-b", "c"),),
    }
    body = (f'F{{gpu="0",UUID="{PARENT}",GPU_I_ID="11"}} 1\n'
            f'F{{gpu="0",UUID="{PARENT}",GPU_I_ID="13"}} 2\n'
            f'F{{gpu="0",UUID="{PARENT}"}} 3\n').encode()
    assert Rewriter(first).rewrite(body).text.decode().splitlines() == [
        f'F{{gpu="0",UUID="{PARENT}",GPU_I_ID="11",namespace="ml",pod="small-b",container="c"}} 1',
        f'F{{gpu="0",UUID="{PARENT}",GPU_I_ID="13",namespace="ml",pod="small-a",container="c"}} 2',
        f'F{{gpu="0",UUID="{PARENT}"}} 3',  # GPU-level: no pod holds the whole GPU
    ]


def test_nvml_that_does_not_initialise_gives_no_resolver(log_stream):
    nvml = FakeNvml({MIG_A: (PARENT, 1)}, init_error=NVMLError("NVML Shared Library Not Found"))
    assert make_mig_resolver(nvml) is None
    log = log_stream.getvalue()
    assert log.count("level=info") == 1 and "will be reported as unresolved" in log
    assert "NVML Shared Library Not Found" in log and nvml.calls == ["nvmlInit"]


def test_without_nvidia_ml_py_there_is_no_resolver():
    # The test extra installs nvidia-ml-py, so its absence is simulated the way Python itself marks a
    # module that cannot be imported (None in sys.modules), in a child interpreter of its own.
    program = (
        "import sys; sys.modules['pynvml'] = None\n"
        "from exporter.base.logs import setup_logging; setup_logging('debug', 'logfmt', sys.stdout)\n"
        "from exporter.vendors.nvidia.nvml.library import make_mig_resolver\n"
        "print(make_mig_resolver())\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                            cwd=str(Path(__file__).resolve().parents[2]))
    assert result.stdout.endswith("None\n") and result.stdout.count("level=info") == 1
    assert "libnvidia-ml.so.1 visible" in result.stdout and "nvidia-ml-py (module pynvml) is not installed" in result.stdout


class HangsOnce(FakeNvml):
    """NVML whose first MIG lookup hangs until the test lets it go (a GPU waking, a driver stalled)."""

    def __init__(self, instances):
        super().__init__(instances)
        self.release, self.returned, self._first = threading.Event(), threading.Event(), True

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802 - NVML's name
        if self._first:
            self._first = False
            self.release.wait(30)
            self.returned.set()
        return super().nvmlDeviceGetHandleByUUID(uuid)


def test_a_lookup_that_answers_late_resolves_at_the_next_ask_not_after_the_failure_interval():
    nvml = HangsOnce({MIG_A: (PARENT, 13), MIG_B: (PARENT, 11)})
    resolver = NvmlMigResolver(nvml, clock=ManualClock(), timeout_seconds=0.2)
    assert resolver(MIG_A) is None  # no answer within the bound
    assert resolver(MIG_B) is None  # refused at once while the first call still hangs
    nvml.release.set()
    assert nvml.returned.wait(10)
    # No time has passed on the resolver's clock: neither device is remembered as failed.
    assert wait_for(lambda: resolver(MIG_A)) == (PARENT, "13")
    assert resolver(MIG_B) == (PARENT, "11")


def wait_for(call):
    """call()'s first answer that is not None: the hung worker thread ends just after the call returns."""
    from support.waiting import wait_until

    answers = []
    wait_until(lambda: answers.append(call()) or answers[-1] is not None, timeout_seconds=10)
    return answers[-1]


def test_a_placement_names_its_gpu_instance_through_the_real_binding_and_is_asked_again_each_time(nvml_node, log_stream):
    """A dynamic DRA MIG device has no UUID: the parent, the GPU instance profile ID and the placement start
    find its instance (nvmlDeviceGetGpuInstances, nvmlGpuInstanceGetInfo), through nvidia-ml-py and the fake
    libnvidia-ml.so.1. An instance made again at the same placement may get another ID: nothing is cached."""
    import pynvml

    nvml_node.gpu(0, PARENT).mig(0, 11, MIG_A, profile=19, start=4).mig(0, 13, MIG_B, profile=19, start=6)
    nvml_node.mig(0, 2, "MIG-0f0e0d0c-0b0a-5908-8706-050403020100", slices=2, profile=14, start=6).write()
    resolver = make_mig_resolver()
    try:
        assert resolver.placement(PARENT, 19, 6) == "13"
        assert resolver.placement(PARENT, 19, 4) == "11"
        assert resolver.placement(PARENT, 14, 6) == "2"  # the profile tells two instances at one start apart
        for _ in range(2):
            assert resolver.placement(PARENT, 19, 5) is None  # nothing there
        assert resolver.placement("GPU-00000000-0000-0000-0000-000000000000", 19, 6) is None
        nvml_node.lines = [line for line in nvml_node.lines if MIG_B not in line]
        nvml_node.mig(0, 7, MIG_B, profile=19, start=6).write()
        pynvml.nvmlDeviceGetCount()  # the fake reads its node again there
        assert resolver.placement(PARENT, 19, 6) == "7"
    finally:
        pynvml.nvmlShutdown()
    log = log_stream.getvalue()
    assert log.count("NVML cannot find a MIG device's GPU instance") == 2  # once per placement, not per ask
    assert "placement_start=5" in log and "Not Found" in log


def test_a_placement_lookup_a_plain_binding_cannot_make_is_unresolved():
    resolver = NvmlMigResolver(FakeNvml({MIG_A: (PARENT, 13)}))  # no GPU instance calls at all
    assert resolver.placement(PARENT, 19, 0) is None
