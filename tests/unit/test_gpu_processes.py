"""NVML per-process reading through the real nvidia-ml-py binding over the fake libnvidia-ml.so.1 in C
(loaded into this process: fixtures nvml_node and fake_nvml_loaded in conftest.py)."""

from __future__ import annotations

import pytest

from exporter.core.identity import GpuIdentity
from exporter.vendors.nvidia.nvml.library import open_nvml
from exporter.vendors.nvidia.nvml.processes import NvmlError, NvmlProcessReader
from support.nvml_node import NODE_ENV
from support.waiting import wait_until

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"
MIG_A = "MIG-0a0a0a0a-1b1b-2c2c-3d3d-4e4e4e4e4e4e"
MIG_B = "MIG-5f5f5f5f-6a6a-7b7b-8c8c-9d9d9d9d9d9d"
MIB = 1024 * 1024


def reader(window_seconds=5.0):
    nvml, problem = open_nvml()
    assert nvml is not None, problem
    return NvmlProcessReader(nvml, window_seconds)


def by_device(entries):
    return {entry.device: entry for entry in entries}


def test_processes_of_every_kind_with_memory_and_sm(nvml_node):
    nvml_node.gpu(0, GPU0, minor=4).gpu(1, GPU1)
    nvml_node.process(GPU0, 100, 300 * MIB).process(GPU0, 101, 5 * MIB, kind="graphics")
    nvml_node.process(GPU0, 102, 700 * MIB, kind="mps").process(GPU0, 100, 300 * MIB, kind="mps")  # in two lists
    nvml_node.sample(GPU0, 100, 40).sample(GPU0, 100, 60, age_ms=200).sample(GPU0, 102, 25)
    nvml_node.write()
    devices = by_device(reader().read())
    gpu0, gpu1 = GpuIdentity(GPU0, "0", "nvidia4", ""), GpuIdentity(GPU1, "1", "nvidia1", "")
    assert set(devices) == {gpu0, gpu1}
    assert devices[gpu0].memory_bytes == {100: 300 * MIB, 101: 5 * MIB, 102: 700 * MIB}
    assert devices[gpu0].sm_ratio == {100: 0.5, 102: 0.25}  # two samples of 100 in the window: their mean
    assert devices[gpu1].memory_bytes == {} and devices[gpu1].sm_ratio == {}  # NOT_FOUND: no sample, supported


def test_samples_older_than_the_window_are_left_out(nvml_node):
    nvml_node.gpu(0, GPU0).process(GPU0, 100, MIB).sample(GPU0, 100, 90, age_ms=10_000).sample(GPU0, 100, 30)
    nvml_node.write()
    assert reader(window_seconds=2.0).read()[0].sm_ratio == {100: 0.3}


def test_mig_instances_are_read_one_by_one_without_sm(nvml_node):
    nvml_node.gpu(0, GPU0).mig(0, 3, MIG_A).mig(0, 5, MIG_B).gpu(1, GPU1)
    nvml_node.process(MIG_A, 200, 1024 * MIB).process(MIG_B, 201, 2048 * MIB).process(MIG_B, 202, 10 * MIB)
    nvml_node.write()
    devices = by_device(reader().read())
    mig_a, mig_b = GpuIdentity(GPU0, "0", "nvidia0", "3"), GpuIdentity(GPU0, "0", "nvidia0", "5")
    assert set(devices) == {mig_a, mig_b, GpuIdentity(GPU1, "1", "nvidia1", "")}  # no whole-GPU entry for GPU 0
    assert devices[mig_a].memory_bytes == {200: 1024 * MIB}
    assert devices[mig_b].memory_bytes == {201: 2048 * MIB, 202: 10 * MIB}
    assert devices[mig_a].sm_ratio is None and devices[mig_b].sm_ratio is None  # NOT_SUPPORTED on MIG


def test_a_gpu_without_per_process_utilisation_has_no_sm(nvml_node):
    nvml_node.gpu(0, GPU0, utilization=False).process(GPU0, 100, MIB).write()
    assert reader().read()[0].sm_ratio is None


def test_a_lost_gpu_is_skipped_and_the_others_read(nvml_node, log_stream):
    nvml_node.gpu(0, GPU0).gpu(1, GPU1).process(GPU0, 99, MIB).process(GPU1, 100, MIB)
    nvml_node.fail("nvmlDeviceGetComputeRunningProcesses", 15, GPU0).write()
    read = reader()
    for _ in range(3):
        assert [(entry.device.uuid, entry.memory_bytes) for entry in read.read()] == [(GPU1, {100: MIB})]
    log = log_stream.getvalue()
    assert log.count("NVML cannot read some GPUs") == 1 and "GPU 0: GPU is lost" in log  # once, not per refresh


def test_a_node_nvml_cannot_list_raises(nvml_node):
    nvml_node.gpu(0, GPU0).fail("nvmlDeviceGetCount", 15).write()
    with pytest.raises(NvmlError, match="NVML cannot list GPUs: GPU is lost") as caught:
        reader().read()
    assert caught.value.reason == "gpu_lost"


def test_changes_to_the_node_show_in_the_next_read(nvml_node):
    nvml_node.gpu(0, GPU0).process(GPU0, 100, MIB).write()
    read = reader()
    assert read.read()[0].memory_bytes == {100: MIB}
    nvml_node.lines.pop()
    nvml_node.process(GPU0, 101, 2 * MIB).write()
    assert read.read()[0].memory_bytes == {101: 2 * MIB}


def test_without_a_driver_nvml_does_not_open(fake_nvml_loaded, tmp_path, monkeypatch):
    monkeypatch.setenv(NODE_ENV, str(tmp_path / "absent.txt"))
    nvml, problem = open_nvml()
    assert nvml is None and problem == "NVML did not initialise: Driver Not Loaded"


def test_the_boards_energy_moves_and_is_repeated_on_each_mig_instance_with_its_slices(nvml_node):
    nvml_node.gpu(0, GPU0).mig(0, 1, MIG_A, slices=4).mig(0, 5, MIG_B).gpu(1, GPU1)
    nvml_node.energy(GPU0, 5_000_123).energy(GPU1, 77).write()
    read = reader()
    devices = {(entry.device.uuid, entry.device.instance): entry for entry in read.read()}
    assert {key: (entry.energy_mj, entry.memory_slices) for key, entry in devices.items()} == {
        (GPU0, "1"): (5_000_123, 4), (GPU0, "5"): (5_000_123, 1), (GPU1, ""): (77, 0)}
    nvml_node.energy(GPU0, 5_100_000).write()  # the counter moves between refreshes
    assert {entry.energy_mj for entry in read.read() if entry.device.uuid == GPU0} == {5_100_000}


def test_a_gpu_without_energy_or_with_a_failing_energy_call_still_has_its_processes(nvml_node):
    nvml_node.gpu(0, GPU0).gpu(1, GPU1).energy(GPU1, 10).process(GPU0, 100, MIB).process(GPU1, 101, MIB)
    nvml_node.fail("nvmlDeviceGetTotalEnergyConsumption", 999, GPU1).write()
    assert [(entry.energy_mj, entry.memory_bytes) for entry in reader().read()] == [(None, {100: MIB}),
                                                                                   (None, {101: MIB})]


def test_a_drawing_boards_energy_grows_by_itself(nvml_node):
    nvml_node.gpu(0, GPU0).energy(GPU0, 1000, milliwatts=200_000).write()  # a board drawing 200 W
    read = reader()
    first = read.read()[0].energy_mj
    second = wait_until(lambda: (energy := read.read()[0].energy_mj) > first and energy)
    assert first >= 1000 and second > first
